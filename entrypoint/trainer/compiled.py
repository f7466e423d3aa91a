"""torch.compile as the plan says (`trainer.compile`, `trainer.compile_mode`), and inductor's warm cache.

`blocks` compiles each transformer block (one graph, reused by every layer, so compiling costs one
block's time; FSDP2 and DDP keep their hooks between blocks), `model` the whole model. Applied before
the strategy wraps the model and after activation checkpointing is set, as torchtitan does.
"""

import os
from collections.abc import Iterable
from pathlib import Path

from torch import nn

from compiler.spec.schema import Compile, TrainerConfig

CACHE_FOLDER = "compile-cache"
"""Under the checkpoints folder, which a restarted job gets back: it does not compile from scratch."""


def apply_compile(model: nn.Module, blocks: Iterable[nn.Module], trainer: TrainerConfig) -> None:
    """`blocks`: the model's repeated blocks (`ModelSpec.blocks`)."""
    scope = Compile(trainer.compile)
    options = {} if trainer.compile_mode == "default" else {"mode": trainer.compile_mode}
    if scope is Compile.blocks:
        for block in blocks:
            block.compile(**options)
    elif scope is Compile.model:
        model.compile(**options)


def use_warm_cache(trainer: TrainerConfig, checkpoints: Path) -> None:
    """Point inductor's and triton's caches into the checkpoints folder where the plan compiles (unless the job
    set them itself); an eager run leaves no cache folder there."""
    if Compile(trainer.compile) is Compile.false:
        return
    cache = checkpoints / CACHE_FOLDER
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
