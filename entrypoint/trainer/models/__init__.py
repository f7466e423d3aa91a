"""The models the trainer builds, by `model.family` (the planner's `compiler.planner.models` has the same
keys and counts their parameters without torch). The engines and the trainer get a model only through an
entry here: how to build it, initialise it after materialising it from the meta device, split it for tensor
parallelism and into pipeline stages, and write its weights.

Adding a family: a module with its `nn.Module` and a `ModelSpec`, one line in `MODELS`, and its counting
entry in `compiler.planner.models.FAMILIES` (the conformance test holds the two to each other).
"""

from typing import Protocol

import torch
from torch import nn
from torch.distributed.tensor.parallel import ParallelStyle

from compiler.spec.schema import Checkpointing, ModelConfig
from entrypoint.trainer.context_parallel import ContextParallel
from entrypoint.trainer.models.decoder import DecoderSpec
from entrypoint.trainer.models.pretrained import PretrainedSpec
from entrypoint.trainer.models.weights import WeightsFormat
from entrypoint.trainer.offload import ActivationOffload


class ModelSpec(Protocol):
    name: str
    builds_empty: bool
    """Always built on the meta device and filled by `init_weights` once the engine has wrapped or sharded it
    (a checkpoint's weights are read into each rank's own tensors)."""
    weights: WeightsFormat
    """How the final model's weights are written and read."""

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean loss of the module's output against the targets, skipping targets equal to
        `loss.IGNORE_INDEX` (`loss.mean_cross_entropy` does both)."""
        ...

    def build(self, config: ModelConfig) -> nn.Module:
        """The module, initialised, on the default device (`with torch.device("meta")` builds it empty)."""
        ...

    def init_weights(self, module: nn.Module) -> None:
        """Initialise a module or a stage of it materialised from the meta device, drawing what `build` draws."""
        ...

    def init_parameter(self, module: nn.Module, name: str, param: torch.Tensor) -> None:
        """Initialise one parameter (ZeRO-3 gathers one at a time)."""
        ...

    def blocks(self, module: nn.Module) -> list[nn.Module]:
        """The repeated blocks of a module or a stage: each is sharded, compiled and split on its own."""
        ...

    def tp_plan(self, config: ModelConfig) -> dict[str, ParallelStyle]:
        """Module names inside a block → how tensor parallelism splits them: column-split linears, and row-split
        ones that end a sublayer (the FSDP+TP engine shards the rest of the block by sequence around them)."""
        ...

    def output_projection(self, module: nn.Module) -> nn.Module | None:
        """The linear that projects the final hidden states to logits, when it has a weight of its own (tensor
        parallelism splits it by vocabulary); None when it is tied to the token embedding."""
        ...

    def stage(self, module: nn.Module, layers: range, first: bool, last: bool) -> nn.Module:
        """A pipeline stage: blocks `layers`, with the input side if `first`, the output side if `last`,
        sharing the module's parameters under their names in the whole module."""
        ...

    def tied_parameter(self, config: ModelConfig) -> str | None:
        """A parameter the first and the last stage both use, each with its own copy; None if there is none."""
        ...

    def set_checkpointing(self, module: nn.Module, mode: Checkpointing, every: int = 1) -> None: ...

    def set_activation_offload(self, module: nn.Module, offload: ActivationOffload) -> None: ...

    def set_context_parallel(self, module: nn.Module, context: ContextParallel) -> None:
        """parallelism.cp > 1: run this rank's part of each sequence, attention over the whole of it."""
        ...


MODELS: dict[str, ModelSpec] = {"decoder": DecoderSpec(), "hf": PretrainedSpec()}


def model_spec(config: ModelConfig) -> ModelSpec:
    """The plan's family (the planner checked that it is one)."""
    return MODELS[config.family]
