"""torchrun for the built-in trainer under in-job restarts (`trainer.restarts`), whose workers fork from a warm
interpreter: `python -m entrypoint.trainer.workers <torchrun's options> -m entrypoint.trainer --plan=PLAN`.

Under torchrun's own launch every worker, also every restarted one, is a fresh Python process that imports
torch and the trainer before it can rejoin: 3.6 s for one process in the smoke image, and 11.6 s, over half
of a restart, when a node's ranks import at once on two busy cores (`bench/recovery.py`). Here torchrun's
agent starts the trainer's `main` as a function through multiprocessing's forkserver, which imports the
trainer once when the job starts (before any CUDA call, so the forked workers may use CUDA) and forks every
worker of every attempt from it. The options, the rendezvous, the restarts, the environment each worker gets
and the failures the agent reports are torchrun's, unchanged.
"""

import dataclasses
import multiprocessing
import sys

from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.launcher.api import elastic_launch
from torch.distributed.run import config_from_args, parse_args

TRAINER = "entrypoint.trainer"
"""The module the command line names after torchrun's options (`-m entrypoint.trainer`), as for torchrun."""
WARM = ["entrypoint.trainer.train", __name__]
"""What the forkserver imports once: the trainer, and this module, which a worker's function is found in."""


def trainer_main(argv: list[str]) -> None:
    """A worker: the trainer's `main`, imported already in the forkserver it was forked from (the agent
    itself never imports the trainer)."""
    from entrypoint.trainer.train import main as trainer

    trainer(argv)


@record
def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.module or args.training_script != TRAINER:
        raise SystemExit(f"entrypoint.trainer.workers starts the built-in trainer only: -m {TRAINER} --plan=PLAN")
    config, _, _ = config_from_args(args)
    multiprocessing.set_forkserver_preload(WARM)
    launch = elastic_launch(dataclasses.replace(config, start_method="forkserver"), entrypoint=trainer_main)
    launch(list(args.training_script_args))


if __name__ == "__main__":
    main()
