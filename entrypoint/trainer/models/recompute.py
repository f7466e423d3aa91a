"""How a block is recomputed in the backward pass under `parallelism.activation_checkpointing`.

- full: the block's input is kept and the whole block runs again in its backward.
- selective: the op-level policy the field uses (torchtitan's): inside the checkpointed block the output of
  every other matrix product (the 1st, 3rd, ... in call order: q, v, the MLP's first projection, ...), the
  attention kernel's outputs and, under tensor parallelism, the reduce-scatters' outputs are kept; everything
  else (the other products, norms, activations, RoPE, the sequence all-gathers) runs again in the backward.
  Built on `torch.utils.checkpoint`'s selective-checkpoint contexts.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from compiler.spec.schema import Checkpointing

_MATMULS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default})
_ATTENTION = frozenset(
    getattr(torch.ops.aten, name).default
    for name in (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    if hasattr(torch.ops.aten, name)
)
_KEPT = _ATTENTION | {torch.ops._c10d_functional.reduce_scatter_tensor.default}
"""Kept whatever their place: attention (the costliest op to run again) and the sequence-parallel reduce-scatters
(a collective run again would add its time to the backward's, as `compiler.planner.speed` counts)."""


def _every_other_matmul() -> Callable[..., CheckpointPolicy]:
    """A policy for one checkpointed call: it counts the products of the forward and of the recomputation
    apart, so that both keep and drop the same ones."""
    seen = {False: 0, True: 0}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in _MATMULS:
            seen[ctx.is_recompute] += 1
            keep = seen[ctx.is_recompute] % 2 == 1
        else:
            keep = op in _KEPT
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _selective_contexts() -> tuple[Any, Any]:
    return create_selective_checkpoint_contexts(_every_other_matmul())


def recomputed(mode: Checkpointing) -> Callable[..., torch.Tensor] | None:
    """The call that runs a block under `mode` (block first, then its arguments), or None where the block
    runs as it is (no checkpointing, or the attention-only mode, which the attention module does itself)."""
    if mode is Checkpointing.full:
        return lambda block, *args: checkpoint(block, *args, use_reentrant=False)
    if mode is Checkpointing.selective:
        return lambda block, *args: checkpoint(block, *args, use_reentrant=False, context_fn=_selective_contexts)
    return None
