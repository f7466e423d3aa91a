"""Direct Preference Optimization's losses and metrics, from the log-probabilities of each pair's completion
tokens under the policy and under the frozen reference model (`trainer.dpo`).

Each loss is TRL's `DPOTrainer` loss of the same `loss_type` (trl 1.16, `trl/trainer/dpo_trainer.py`), so a
recipe tuned there keeps its β here; `tests/test_dpo_loss.py` compares the two. A sequence's log-probability
is the sum over its target tokens (the completion's), as TRL's is over its completion mask.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from compiler.spec.schema import DpoConfig, DpoLoss
from entrypoint.trainer.models.loss import IGNORE_INDEX, whole

METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margin",
    "rewards/accuracy",
    "logps/chosen",
    "logps/rejected",
)
"""The batch means `dpo_loss` reports: a reward is β × (policy − reference) log-probability of a completion."""


@dataclass(frozen=True)
class Completions:
    """The summed log-probabilities of a batch's completions, and how many target tokens each has."""

    logps: torch.Tensor
    tokens: torch.Tensor


def completion_logps(logits: torch.Tensor, targets: torch.Tensor) -> Completions:
    """Each row's summed log-probability of its targets (those not `IGNORE_INDEX`): logits (batch, seq, vocab)
    and targets (batch, seq), already shifted (targets[:, t] is the token after input t). The cross-entropy of
    each token is its negative log-probability, zero where the target is ignored; through it, logits split by
    vocabulary under tensor parallelism reduce under `loss_parallel()` without being gathered."""
    flat = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="none")
    return completions(-whole(flat).view_as(targets), targets)


def completions(logps: torch.Tensor, targets: torch.Tensor) -> Completions:
    """Each row's sum of its targets' log-probabilities `logps` (batch, seq), zero where a target does not count
    (`models.loss.token_logps`, or `completion_logps` from whole logits)."""
    return Completions(logps.sum(1), (targets != IGNORE_INDEX).sum(1))


def dpo_loss(
    chosen: Completions,
    rejected: Completions,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    options: DpoConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean loss over the pairs, and the metrics (detached batch means, `METRICS`)."""
    beta = options.beta
    chosen_ratio = chosen.logps - reference_chosen
    rejected_ratio = rejected.logps - reference_rejected
    delta = chosen_ratio - rejected_ratio
    if options.loss is DpoLoss.sigmoid:
        losses = -F.logsigmoid(beta * delta)
    elif options.loss is DpoLoss.hinge:
        losses = torch.relu(1 - beta * delta)
    elif options.loss is DpoLoss.ipo:  # per completion token, as TRL (with the IPO authors) normalises it
        per_token = chosen_ratio / chosen.tokens.clamp(min=1) - rejected_ratio / rejected.tokens.clamp(min=1)
        losses = (per_token - 1 / (2 * beta)) ** 2
    else:
        flip = options.label_smoothing
        clean = -(1 - flip) * F.logsigmoid(beta * delta)
        flipped = -flip * F.logsigmoid(-beta * delta)
        losses = (clean - flipped) / (1 - 2 * flip)
    chosen_reward, rejected_reward = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
    metrics = {
        "rewards/chosen": chosen_reward.mean(),
        "rewards/rejected": rejected_reward.mean(),
        "rewards/margin": (chosen_reward - rejected_reward).mean(),
        "rewards/accuracy": (chosen_reward > rejected_reward).float().mean(),
        "logps/chosen": chosen.logps.detach().mean(),
        "logps/rejected": rejected.logps.detach().mean(),
    }
    return losses.mean(), metrics
