"""Tensor parallelism as the field runs it on the FSDP+TP engine: sequence parallelism for the residual stream and
the norms, loss parallelism for the output projection and the cross-entropy (Megatron-LM's sequence parallelism,
torchtitan's Llama plan, on torch's `parallelize_module` styles).

Between blocks each tensor-parallel rank holds its 1/tp of every sequence (the residual stream sharded along the
sequence, `Shard(1)`), and the per-token modules of a block (its norms) run on that part alone. Before a sublayer
the family's plan splits by columns (attention, MLP) its input is all-gathered along the sequence; the sublayer's
row-split output projection reduce-scatters into the sequence shards, where plain tensor parallelism
all-reduced: the same bytes on the wire, 1/tp of the activations kept. The model's ends:

- the first block's input (the embeddings, computed whole on every rank) is cut to this rank's part, and the
  last block's output is gathered whole again, so the embeddings, the final norm and whatever the family does
  around its blocks see whole sequences as without tensor parallelism;
- the output projection, when it has a weight of its own, is split by vocabulary and hands back logits as a
  DTensor sharded on the vocabulary: under `loss_parallel()` the cross-entropy reduces over the shards without
  gathering them, so each rank holds tokens × vocab / tp logits (`models.loss` turns the loss back into a plain
  tensor, streamed or not). Tied to the embedding (GPT-2), the projection stays whole and so do the logits.

Every sequence's length must divide by tp (the planner checks it): DTensor's sequence shards are then equal.
"""

import contextlib
from functools import partial

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

SEQUENCE = Shard(1)
"""The residual stream's placement between blocks: (batch, seq, width) split along seq."""


def sequence_parallel_plan(plan: dict[str, ParallelStyle], block: nn.Module) -> dict[str, ParallelStyle]:
    """A block's tensor-parallel plan (`ModelSpec.tp_plan`: names inside the block, column- and row-split
    linears) with its residual stream sharded by sequence: each row-split projection reduce-scatters into
    sequence shards, the module that holds it gathers its input along the sequence, and every other child of the
    block that has parameters (the norms: no name of the plan falls under it) runs on the shards, its weights'
    gradients summed over the tensor-parallel ranks."""
    styles: dict[str, ParallelStyle] = {}
    for name, style in plan.items():
        if isinstance(style, RowwiseParallel):
            styles[name] = RowwiseParallel(output_layouts=SEQUENCE)
            styles[_sublayer(name)] = GatheredInput()
        else:
            styles[name] = style
    split = {name.split(".")[0] for name in plan}
    for name, child in block.named_children():
        if name not in split and any(True for _ in child.parameters()):
            styles[name] = SequenceParallel()
    return styles


def _sublayer(linear: str) -> str:
    """The block's child that holds a row-split projection (`attention` of `attention.o`; LoRA's `base_layer`
    is the projection's own wrapper, not the sublayer)."""
    return linear.removesuffix(".base_layer").split(".")[0]


class GatheredInput(ParallelStyle):
    """A sublayer whose hidden states (the first positional argument, or `hidden_states=` as transformers
    passes them to attention) arrive split by sequence: gathered whole, as a replicated DTensor, so the gradient
    flowing back reduce-scatters into the shards."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        module.register_forward_pre_hook(partial(_gather_hidden, device_mesh), with_kwargs=True)
        return module


def _gather_hidden(mesh: DeviceMesh, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if args:
        return (_replicated(args[0], mesh), *args[1:]), kwargs
    return args, kwargs | {"hidden_states": _replicated(kwargs["hidden_states"], mesh)}


def _replicated(hidden: torch.Tensor, mesh: DeviceMesh) -> DTensor:
    if not isinstance(hidden, DTensor):
        hidden = DTensor.from_local(hidden, mesh, [SEQUENCE], run_check=False)
    return hidden.redistribute(mesh, [Replicate()])


class VocabParallelHead(ColwiseParallel):
    """The output projection split by vocabulary: its input gathered whole, its logits a DTensor sharded on the
    vocabulary (for `loss_parallel`). What is not a DTensor passes through as it is: the per-token
    log-probabilities a streamed head (`models.pretrained`) returns are whole already."""

    def __init__(self) -> None:
        super().__init__(input_layouts=Replicate(), output_layouts=Shard(-1), use_local_output=False)

    @staticmethod
    def _prepare_output_fn(output_layouts, use_local_output, mod, outputs, device_mesh):
        if not isinstance(outputs, DTensor):
            return outputs
        return ColwiseParallel._prepare_output_fn(output_layouts, use_local_output, mod, outputs, device_mesh)


def _split_sequence(mesh: DeviceMesh, module: nn.Module, args: tuple) -> tuple:
    """The first block's input, whole on every rank, cut to this rank's part of each sequence (its gradient is
    gathered back whole for the embeddings)."""
    whole = DTensor.from_local(args[0], mesh, [Replicate()], run_check=False)
    return (whole.redistribute(mesh, [SEQUENCE]).to_local(), *args[1:])


def _gather_sequence(mesh: DeviceMesh, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """The last block's output, this rank's part of each sequence, gathered whole for the final norm."""
    return DTensor.from_local(output, mesh, [SEQUENCE], run_check=False).redistribute(mesh, [Replicate()]).to_local()


def parallelize(
    blocks: list[nn.Module], plan: dict[str, ParallelStyle], head: nn.Module | None, mesh: DeviceMesh
) -> None:
    """Split the blocks by the family's plan with sequence parallelism, the ends as the module's docstring says,
    and the output projection `head` (None: tied to the embedding) by vocabulary."""
    for block in blocks:
        parallelize_module(block, mesh, sequence_parallel_plan(plan, block))
    blocks[0].register_forward_pre_hook(partial(_split_sequence, mesh))
    blocks[-1].register_forward_hook(partial(_gather_sequence, mesh))
    if head is not None:
        parallelize_module(head, mesh, VocabParallelHead())


def parallel_loss(tp: int) -> contextlib.AbstractContextManager:
    """Where a loss and its backward run: `loss_parallel()` under tensor parallelism (the cross-entropy of
    vocabulary-sharded logits; plain tensors are untouched by it), nothing otherwise."""
    return loss_parallel() if tp > 1 else contextlib.nullcontext()
