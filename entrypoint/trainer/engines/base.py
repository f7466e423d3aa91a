"""The interface every engine implements: one training step as `forward_backward` then `step`, a
validation loss, checkpoints, and the whole model's weights for the final save.

An engine is built from the plan, the model family's `ModelSpec` and this rank's device, after the process
group exists; it builds (and shards, splits, wraps) the model itself. Micro batches are (inputs, targets)
pairs of token tensors on any device.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from compiler.spec import Plan
from compiler.spec.strategies import TORCH_ENGINE, facts
from entrypoint.trainer.models import ModelSpec
from entrypoint.trainer.objective import TrainingObjective

MicroBatches = Sequence[tuple[torch.Tensor, torch.Tensor]]


class Engine(Protocol):
    parts: list[nn.Module]
    """This rank's model, or its pipeline stages, without the strategy's wrapper: the straggler detector
    times their blocks."""
    objective: TrainingObjective
    """What the micro batches' losses are (`trainer.objective`), and its own metrics."""

    def __init__(self, plan: Plan, spec: ModelSpec, device: torch.device) -> None: ...

    def forward_backward(self, micro_batches: MicroBatches) -> torch.Tensor:
        """The sum of the micro batches' losses (detached; zero on ranks that compute none, such as a
        pipeline's first stages); their gradients, scaled by 1/micro batches, accumulate and are reduced."""
        ...

    def step(self, lr: float) -> float:
        """Clip, update at learning rate `lr`, clear the gradients; the gradient norm before clipping."""
        ...

    def evaluate(self, micro_batches: MicroBatches) -> torch.Tensor:
        """The sum of the micro batches' losses without gradients, in eval mode; back in train mode after."""
        ...

    def save(self, folder: Path) -> None:
        """This rank's part of a checkpoint (model and optimizer state) into `folder`; every rank calls it."""
        ...

    def load(self, folder: Path) -> None:
        """Restore what `save` wrote, on an engine built from the same plan."""
        ...

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU under the model's parameter names, on rank 0 (empty elsewhere);
        every rank must call it."""
        ...


@contextmanager
def evaluating(*modules: nn.Module) -> Iterator[None]:
    """`Engine.evaluate`'s frame: the modules in eval mode under no_grad, back in train mode after."""
    for module in modules:
        module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module in modules:
            module.train()


def builds_on_meta(plan: Plan) -> bool:
    """FSDP models and pipeline stages whose fp32 weights would take over a quarter of a GPU are built on
    the meta device and materialised after sharding (per stage): each rank then only ever holds its shards.
    (This draws other random numbers than building the whole model, so small models, and every test, build
    whole.)"""
    strategy = facts(plan.parallelism.strategy)
    sharded = (strategy.engine == TORCH_ENGINE and strategy.shards_parameters) or plan.layout.pp > 1
    return sharded and plan.instance.has_gpus and plan.parameters * 4 > plan.instance.gpu_memory_gib * 2**30 / 4


def materialise(spec: ModelSpec, model: nn.Module, device: torch.device) -> None:
    """A model (or stage) built on the meta device, given storage on `device` and filled by its family, after
    the engine has sharded it: each rank fills only what it holds."""
    if any(p.is_meta for p in model.parameters()):
        model.to_empty(device=device)
        spec.init_weights(model)
