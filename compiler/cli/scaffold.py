"""`dockyard init [FOLDER]`: a small project of the user's own, runnable at once.

It holds a `conf/` that dockyard searches before its own (`compiler.config.project`) with an experiment built
from dockyard's groups, a `train.py` that experiment runs as `trainer=script` (torch DDP on every process
torchrun starts), and a README saying how to run it. Nothing that exists is overwritten.
"""

from pathlib import Path

from compiler.config.project import PROJECT_CONF
from compiler.spec.errors import ConfigError

USAGE = """usage: dockyard init [FOLDER]

Write a project into FOLDER (the current folder by default; nothing that exists is overwritten): conf/ with
experiment/mine.yaml (searched before dockyard's own configs), train.py (its trainer=script), .dockerignore
and a README. Then: dockyard launch experiment=mine"""
EXPERIMENT = "mine"
"""The scaffolded experiment's name: `dockyard launch experiment=mine`."""

EXPERIMENT_YAML = """\
# @package _global_
# Your experiment: dockyard's groups (model, hardware, data, target) with your own script as the trainer.
# Options of your own go beside this file (conf/model/NAME.yaml, conf/target/NAME.yaml) and are chosen
# like dockyard's built-in ones; `dockyard plan --help` lists both.
defaults:
  - override /model: tiny
  - override /parallelism: ddp
  - override /hardware: cpu
  - override /data: synthetic
  - override /image: auto
  - override /target: local
  - override /trainer: script

name: mine

hardware:
  nodes: 2  # × 2 processes each (dockyard's hardware/cpu.yaml)

trainer:
  source_dir: .  # relative to this project (the folder holding conf/), whatever the current folder
  script: train.py
  hyperparameters:  # given to train.py as --steps 20 --lr 0.05
    steps: 20
    lr: 0.05
"""

TRAIN_PY = '''\
"""Your training script: dockyard runs it under torchrun on every node (trainer=script), in the image it
builds with this folder as the last layer. Replace the model and data with yours."""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    args, _ = parser.parse_known_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    weights = torch.arange(8, dtype=torch.float32)
    for step in range(1, args.steps + 1):
        inputs = torch.randn(32, 8, generator=torch.Generator().manual_seed(step * world + rank))
        loss = torch.nn.functional.mse_loss(model(inputs).squeeze(1), inputs @ weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0:  # SageMaker's contract: what is in SM_MODEL_DIR is the run's model
        model_dir = os.environ.get("SM_MODEL_DIR", "model")
        os.makedirs(model_dir, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(model_dir, "model.pt"))
    dist.barrier()  # every rank waits for rank 0's save: one that left early would break its peers' connections
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # gloo's worker threads may still be letting go of the last collective; were the interpreter shutting
    # down by then, Python would end such a thread and the finished rank would abort (SIGABRT). So the
    # process leaves without that shutdown, once its output is flushed.
    sys.stdout.flush()
    os._exit(0)
'''

README_MD = """\
# {name}

A training project run by dockyard.

```
dockyard plan experiment=mine               # the plan: layout, memory, cost, warnings
dockyard launch experiment=mine             # build the image, train on two local container nodes
dockyard launch experiment=mine target=sagemaker --dry-run   # the request another target would get
```

`conf/` is searched before dockyard's own configs (from this folder; elsewhere `--config-dir conf` or
`DOCKYARD_CONFIG_DIR`), and `trainer.source_dir` is relative to this folder. `train.py` is the script
`experiment=mine` runs under torchrun; its hyperparameters are in `conf/experiment/mine.yaml`.
"""


DOCKERIGNORE = """\
# What the image's code layer leaves out of this folder (trainer.source_dir): dockyard's results.
outputs
multirun
"""


def project_files(name: str) -> dict[str, str]:
    """Path in the project → its text."""
    return {
        f"{PROJECT_CONF}/experiment/{EXPERIMENT}.yaml": EXPERIMENT_YAML,
        "train.py": TRAIN_PY,
        "README.md": README_MD.format(name=name),
        ".dockerignore": DOCKERIGNORE,
    }


def init_project(folder: Path) -> list[Path]:
    """Write the project into `folder` (made if missing); a file that is there already stops it, unwritten."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError("init", f"'{folder}' is a file, not a folder", "name a new or empty folder")
    files = {folder / path: text for path, text in project_files(folder.resolve().name).items()}
    there = [str(path) for path in files if path.exists() or path.is_symlink()]  # a link would write elsewhere
    if there:
        raise ConfigError("init", f"{there[0]} exists already", "run it in a new or empty folder")
    made: list[Path] = []
    """What this call creates, in order (folders before what they hold), to take back if a write fails."""
    try:
        for path, text in files.items():
            made += reversed([parent for parent in path.parents if not parent.exists()])
            path.parent.mkdir(parents=True, exist_ok=True)
            made.append(path)
            path.write_text(text)
    except OSError as error:
        message = f"cannot write '{error.filename or path}': {error.strerror}"
        _take_back(made, files)
        raise ConfigError("init", message, "name a folder you can write") from None
    return list(files)


def _take_back(made: list[Path], files: dict[Path, str]) -> None:
    """Remove what `init_project` made, innermost first: its files, then its folders that stayed empty."""
    for path in reversed(made):
        if path in files:
            path.unlink(missing_ok=True)
            continue
        try:
            path.rmdir()
        except OSError:  # not made after all, or it holds what this call did not write
            continue


def main(args: list[str]) -> None:
    if args in (["-h"], ["--help"]):
        return print(USAGE)
    if len(args) > 1 or any(arg.startswith("-") for arg in args):
        raise ConfigError("init", f"takes one folder, not {' '.join(args)}", "dockyard init [FOLDER]")
    folder = Path(args[0] if args else ".")
    for path in init_project(folder):
        print(f"wrote     {path}")
    where = "" if folder == Path(".") else f"cd {folder} && "
    print(f"next      {where}dockyard launch experiment={EXPERIMENT}")
