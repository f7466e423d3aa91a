"""What an engine's micro batch trains on (`trainer.objective`): the next-token loss (sft), or DPO's loss over
preference pairs against a frozen reference model (dpo).

A DPO micro batch of m pairs is 2m rows, the chosen completions then the rejected ones
(`text_data.PreferencePairs`). The reference model is the starting weights: with LoRA the same model with
its adapters disabled (no memory of its own), else a frozen copy made before the strategy wraps the model.
"""

import copy
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from compiler.spec import Plan
from compiler.spec.schema import DpoConfig, Objective
from entrypoint.trainer.dpo_loss import METRICS, Completions, completion_logps, dpo_loss
from entrypoint.trainer.models import ModelSpec


class TrainingObjective(Protocol):
    def loss(self, model: Callable[[torch.Tensor], Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The micro batch's mean loss through `model` (the strategy's wrapper)."""
        ...

    def metrics(self) -> dict[str, float]:
        """This rank's means of the objective's own metrics over the micro batches since the last call."""
        ...


class NextToken:
    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def loss(self, model: Callable[[torch.Tensor], Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.spec.loss(model(inputs), targets)

    def metrics(self) -> dict[str, float]:
        return {}


class Preference:
    """DPO (`entrypoint.trainer.dpo_loss`) with the reference model's log-probabilities computed as it goes."""

    def __init__(self, options: DpoConfig, reference: Callable[[torch.Tensor], Any]) -> None:
        self.options, self.reference = options, reference
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def loss(self, model: Callable[[torch.Tensor], Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        policy = completion_logps(logits(model(inputs)), targets)
        with torch.no_grad():
            reference = completion_logps(logits(self.reference(inputs)), targets).logps
        half = len(inputs) // 2
        chosen = Completions(policy.logps[:half], policy.tokens[:half])
        rejected = Completions(policy.logps[half:], policy.tokens[half:])
        loss, metrics = dpo_loss(chosen, rejected, reference[:half], reference[half:], self.options)
        for name in METRICS:
            self.sums[name] = self.sums.get(name, 0) + metrics[name]
        self.count += 1
        return loss

    def metrics(self) -> dict[str, float]:
        means = {name: (total / max(self.count, 1)).item() for name, total in self.sums.items()}
        self.sums, self.count = {}, 0
        return means


def logits(output: Any) -> torch.Tensor:
    """A family's output: the logits themselves, or transformers' output holding them."""
    return output if isinstance(output, torch.Tensor) else output.logits


def make_objective(plan: Plan, spec: ModelSpec, model: nn.Module) -> TrainingObjective:
    """The plan's objective for `model` (this rank's module, before the strategy wraps it when the reference is a
    copy: DDP's replicas hold a whole model)."""
    if plan.trainer.objective is Objective.sft:
        return NextToken(spec)
    if plan.model.lora.rank:
        return Preference(plan.trainer.dpo, _without_adapters(model))
    return Preference(plan.trainer.dpo, copy.deepcopy(model).eval().requires_grad_(False))


def _without_adapters(model: nn.Module) -> Callable[[torch.Tensor], Any]:
    """The base model: the peft model with its adapters disabled for the length of one forward pass."""

    def reference(inputs: torch.Tensor) -> Any:
        with model.disable_adapter():
            return model(inputs)

    return reference
