"""The `dockyard` command's entry point: `compiler.cli.main` imported with Python's cyclic garbage collector paused,
and the methods of its dataclasses taken compiled from an earlier command (`compiler.core.dataclass_code`).

Importing Hydra, OmegaConf and the plan's ~60 dataclasses makes some 55,000 objects the collector tracks and
almost no garbage (about a thousand objects), yet it runs about 85 times over them as they are made: a fifth of
the imports' CPU time on this project's machine (0.49 s against 0.39 s). They are then frozen (`gc.freeze`: kept
out of every later collection) and the collector resumes, so a `launch` that follows its job for hours collects
as any Python process does."""

import gc

from compiler.core import dataclass_code


def main() -> None:
    gc.disable()
    try:
        methods = dataclass_code.install()
        from compiler.cli.main import main as run_command
    finally:
        gc.freeze()
        gc.enable()
    try:
        run_command()
    finally:
        methods.save()
