"""The language-modelling loss every family shares, and the target value it skips.

Targets equal to `IGNORE_INDEX` are no targets: a prompt token under `data.loss_on=assistant`, the padding of
an unpacked document. Every family's `ModelSpec.loss` must skip them (the conformance test checks it).

The trainer's loss streams the vocabulary (`trainer.loss_chunk`): `token_logps` runs the output projection
over `chunk` tokens at a time, each chunk under activation checkpointing, so the logits of at most one chunk
(and their fp32 copy and gradient) exist at once, in the forward and in the backward pass, instead of
tokens × vocabulary of each. The same per-token log-probabilities serve the cross-entropy and DPO's sums.

Under tensor parallelism the logits are a DTensor split by vocabulary (`engines.sequence_parallel`), and the
engine runs the loss under `loss_parallel()`: `F.cross_entropy` then reduces over the vocabulary shards without
gathering them, whole or chunk by chunk, and its result (whole on every rank) goes on as a plain tensor. The
streamed loss stays exact: each chunk's tokens are whole rows of the logits, split by vocabulary only.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100
"""`torch.nn.functional.cross_entropy`'s default ignore_index, so any loss built on it skips the same value."""


def mean_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy over the targets that count; zero (not NaN) when none does."""
    total = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return whole(total) / (targets != IGNORE_INDEX).sum().clamp(min=1)


def token_logps(
    hidden: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor, chunk: int
) -> torch.Tensor:
    """The log-probability of each target (batch, seq), zero where it is `IGNORE_INDEX`: `hidden` (batch, seq,
    width) are the final hidden states, `project` the output projection (hidden → logits)."""
    flat_hidden, flat_targets = hidden.flatten(0, 1), targets.flatten()
    pieces = [
        checkpoint(_chunk_logps, part, project, wanted, use_reentrant=False)
        for part, wanted in zip(flat_hidden.split(chunk), flat_targets.split(chunk), strict=True)
    ]
    return torch.cat(pieces).view_as(targets)


def _chunk_logps(hidden: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor):
    logits = project(hidden).float()
    return -whole(F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="none"))


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A loss of vocabulary-split logits (a DTensor, whole on every rank) as a plain tensor; others as they are."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def mean_negative(logps: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy from `token_logps`' log-probabilities; zero (not NaN) when no target counts."""
    return -logps.sum() / (targets != IGNORE_INDEX).sum().clamp(min=1)
