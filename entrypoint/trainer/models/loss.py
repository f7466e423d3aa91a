"""The language-modelling loss every family shares, and the target value it skips.

Targets equal to `IGNORE_INDEX` are no targets: a prompt token under `data.loss_on=assistant`, the padding of
an unpacked document. Every family's `ModelSpec.loss` must skip them (the conformance test checks it)."""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""`torch.nn.functional.cross_entropy`'s default ignore_index, so any loss built on it skips the same value."""


def mean_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy over the targets that count; zero (not NaN) when none does."""
    total = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (targets != IGNORE_INDEX).sum().clamp(min=1)
