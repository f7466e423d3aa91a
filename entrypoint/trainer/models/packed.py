"""Packed windows with document-boundary masking (`data.packing_mask=true`).

A window of several documents reaches the model as inputs of shape (batch, 2, seq): the token ids and each
token's position inside its document, restarting at 0 where a document begins (and at the window's start,
so that a document cut by a window never counts positions past the model's context). A plain (batch, seq)
tensor is an ordinary window. One tensor, so the engines, FSDP, DDP and ZeRO move and split it as they move
token ids.

Attention stays inside a document: the block-diagonal causal mask joins query i to key j when j <= i and no
document starts in (j, i].
"""

import torch

TOKENS, POSITIONS = 0, 1


def packed(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return torch.stack([tokens, positions], dim=1)


def unpacked(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(token ids, positions or None for an ordinary window)."""
    if inputs.dim() == 3:
        return inputs[:, TOKENS], inputs[:, POSITIONS]
    return inputs, None


def document_mask(positions: torch.Tensor) -> torch.Tensor:
    """The boolean attention mask (batch, 1, seq, seq) of `positions` (batch, seq): True where attention is
    allowed, for `scaled_dot_product_attention`."""
    documents = (positions == 0).cumsum(dim=-1)
    seq = positions.shape[-1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
    same = documents.unsqueeze(-1) == documents.unsqueeze(-2)
    return (same & causal).unsqueeze(1)
