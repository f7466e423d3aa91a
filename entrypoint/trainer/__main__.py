from entrypoint.trainer.train import main

main()
