"""Context parallelism for `model.family=hf` (`parallelism.cp`, all-to-all over heads): the same split as the
built-in decoder's (`context_parallel`), with transformers' own attention inside the exchange.

- The model's forward receives this rank's part of each sequence (two load-balanced chunks) and its tokens' true
  positions as `position_ids`, from which every transformers decoder computes its rotary angles.
- An attention function registered in transformers' `AttentionInterface` (the model's `attn_implementation`)
  trades heads for tokens, runs transformers' SDPA attention on the whole sequence, and trades back. It has no
  mask function of its own, so transformers builds no mask for the split (non-contiguous) positions; the causal
  mask, or a packed window's document mask made from the whole window's positions, is the one attention uses.
- The output projection's per-token log-probabilities are summed over the group into the whole sequence's
  (`ContextParallel.whole_sequence`), as the decoder's are.
"""

from functools import partial

import torch
from torch import nn

from entrypoint.trainer.context_parallel import ContextParallel

ATTENTION = "dockyard_context_parallel"
"""The name the attention function is registered under in transformers' `AttentionInterface`."""
DOCUMENT_MASK = "dockyard_document_mask"
"""The forward keyword that carries a packed window's whole document mask down to the attention function
(transformers passes a decoder's extra keywords through its layers to the attention function)."""


def use_context_parallel(model: nn.Module, context: ContextParallel) -> None:
    """Register the exchanged attention for `context` and make it `model`'s (a transformers `PreTrainedModel`)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, partial(_exchanged_attention, context))
    model.set_attn_implementation(ATTENTION)


def _exchanged_attention(
    context: ContextParallel,
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention function signature: q, k, v (batch, heads, this rank's tokens, head_dim) in,
    (batch, this rank's tokens, heads, head_dim) out. `attention_mask` is None (no mask function is registered)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    window = kwargs.pop("sliding_window", None)
    if window is not None and window < query.shape[2] * context.size:
        raise NotImplementedError(f"sliding-window attention ({window} tokens) runs without parallelism.cp")
    mask = kwargs.pop(DOCUMENT_MASK, None)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, whole_mask: torch.Tensor | None) -> torch.Tensor:
        out, _ = sdpa_attention_forward(module, q, k, v, whole_mask, **kwargs)
        return out.transpose(1, 2)

    return context.around(attend)(query, key, value, mask).transpose(1, 2), None
