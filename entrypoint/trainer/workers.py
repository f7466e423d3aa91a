"""torchrun for the built-in trainer, whose workers fork from a warm interpreter:
`python -m entrypoint.trainer.workers <torchrun's options> -m entrypoint.trainer --plan=PLAN`.

Under torchrun's own launch every worker, also every restarted one, is a fresh Python process that imports
torch and the trainer: 3.6 s for one process in the smoke image, and 11.6 s, over half of an in-job restart,
when a node's ranks import at once on two busy cores (`bench/recovery.py`); the smoke job (two nodes of two ranks) used
14 % less CPU for 20 steps once its ranks forked (35.6 against 41.2 CPU-s, means of 4 runs).
Here torchrun's agent starts the trainer's `main` as a function through multiprocessing's forkserver, which holds
the trainer imported (before any CUDA call, so the forked workers may use CUDA) and forks every worker of every
attempt from it. The options, the rendezvous, the restarts, the environment each worker gets and the failures
the agent reports are torchrun's, unchanged.
"""

import argparse
import dataclasses
import importlib
import multiprocessing
import os
import socket
import sys
from multiprocessing import connection, forkserver, resource_tracker
from pathlib import Path

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.launcher.api import elastic_launch
from torch.distributed.run import config_from_args, parse_args

from compiler.spec import Plan
from compiler.spec.schema import BaseQuantization
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer.compiled import use_warm_cache

TRAINER = "entrypoint.trainer"
"""The module the command line names after torchrun's options (`-m entrypoint.trainer`), as for torchrun."""
WARM = ["entrypoint.trainer.train", "torch._dynamo"]
"""What the forkserver holds imported: the trainer, and torch._dynamo, which the engines build through (DDP's
constructor imports it) and torch's log formatter imports when the agent logs a worker's failure
(`logger.exception`), which would hold up every restart by the import (1.5-2 s on the smoke image's busy
cores). Its import fixes inductor's cache folder, so the warm cache is set first, as the trainer sets it
(`compiled.use_warm_cache`)."""
HUGGING_FACE = ["transformers.modeling_utils"]
"""Also held for `model=hf`: what the ranks' `from transformers import AutoModelForCausalLM` imports (1.6-1.9 s of
CPU in an image with transformers), once per node instead of once per rank; with LoRA peft too, unless its base is
quantized (peft then imports bitsandbytes, which asks CUDA about the GPU as it loads)."""
PLAN_OPTION = argparse.ArgumentParser(add_help=False)
PLAN_OPTION.add_argument("--plan", type=Path, required=True)
"""The trainer's `--plan`, read here for what the agent must know before any worker starts."""
FORKSERVER_STATE = {"_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_inherited_fds", "_lock",
                    "_preload_modules"}  # fmt: skip
"""multiprocessing's forkserver client as Python 3.11 keeps it (`forkserver.ForkServer`, the images' Python):
where a Python keeps it otherwise, the forkserver is multiprocessing's own, which imports the modules again."""


def trainer_main(argv: list[str]) -> None:
    """A worker: the trainer's `main`, imported already in the forkserver it was forked from (`WARM`, which
    the agent imports before it forks the forkserver). Its exception is printed as a worker process prints
    it at exit (behind its rank, torch's hook), which multiprocessing would keep to itself: the launcher reads
    a stop's or a failure's reason from the log (`launcher.failures`)."""
    from entrypoint.trainer.train import main as trainer

    try:
        trainer(argv)
    except SystemExit:
        raise  # multiprocessing prints its message, as Python does at exit: a data error stays one line
    except BaseException:
        sys.excepthook(*sys.exc_info())
        raise


@record
def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.module or args.training_script != TRAINER:
        raise SystemExit(f"entrypoint.trainer.workers starts the built-in trainer only: -m {TRAINER} --plan=PLAN")
    plan = Plan.from_json(PLAN_OPTION.parse_known_args(args.training_script_args)[0].plan.read_text())
    use_warm_cache(plan.trainer, Paths(Path(os.environ.get("DOCKYARD_ROOT", "/opt/ml"))).checkpoints)
    modules = warm_modules(plan)
    for module in modules:
        importlib.import_module(module)
    start_forkserver(modules)
    config, _, _ = config_from_args(args)  # after the fork: torchrun's config asks CUDA how many GPUs there are
    launch = elastic_launch(dataclasses.replace(config, start_method="forkserver"), entrypoint=trainer_main)
    launch(list(args.training_script_args))


def warm_modules(plan: Plan) -> list[str]:
    """What the forkserver holds imported for `plan`'s ranks."""
    if plan.model.family != "hf":
        return WARM
    lora = plan.model.lora
    return [*WARM, *HUGGING_FACE, *(["peft"] if lora.rank and lora.quantize_base is BaseQuantization.none else [])]


def start_forkserver(modules: list[str]) -> None:
    """multiprocessing's forkserver, forked from this process, which has imported `modules` and has yet to call
    CUDA or start torchrun's threads, where multiprocessing would start a new interpreter that imports them all
    again: torch is imported once per node instead of twice (2.4 s of CPU in the smoke image). Where an import
    has set up CUDA after all, which a forked worker could not use, multiprocessing's own starts instead. The
    server's loop and its workers are multiprocessing's (`forkserver.main`); it ends, as multiprocessing's does,
    when this process closes its end of the alive pipe, and without finalizing its interpreter: it has nothing to
    flush or release, tearing down torch and the trainer took 1-2 s of CPU, and the node's log pipe, which it
    holds, stayed open meanwhile (every forked worker ends through `os._exit` too)."""
    client = forkserver._forkserver
    if set(vars(client)) != FORKSERVER_STATE or torch.cuda.is_initialized():
        multiprocessing.set_forkserver_preload([*modules, __name__])
        return
    resource_tracker.ensure_running()
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            try:
                forkserver.main(listener.fileno(), alive_r, preload=[])
            finally:
                os._exit(0)
        os.close(alive_r)
    client._forkserver_address, client._forkserver_alive_fd, client._forkserver_pid = address, alive_w, pid


if __name__ == "__main__":
    main()  # a failure raises: the exit status and the traceback are Python's
    # The job has ended on every node (torchrun's exit barrier). Tearing down torch's modules took the agent
    # 0.7 s more, which the container's exit waited for: the agent ends without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
