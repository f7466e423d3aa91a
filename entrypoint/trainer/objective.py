"""What an engine's micro batch trains on (`trainer.objective`): the next-token loss (sft), or DPO's loss over
preference pairs against a frozen reference model (dpo).

A DPO micro batch of m pairs is 2m rows, the chosen completions then the rejected ones
(`data.preference.PreferencePairs`). The reference model is the starting weights: with LoRA the same model with
its adapters disabled (no memory of its own), else a frozen copy the engine makes (whole beside DDP's and
ZeRO-1/2's replicas, made before they wrap the model; sharded as the policy is beside FSDP2).
"""

import copy
import hashlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from compiler.spec import Plan
from compiler.spec.schema import DpoConfig, Objective
from entrypoint.trainer.dpo_loss import METRICS, Completions, completion_logps, completions, dpo_loss
from entrypoint.trainer.models import ModelSpec
from entrypoint.trainer.models.experts import RouterMetrics
from entrypoint.trainer.models.loss import mean_negative


class TrainingObjective(Protocol):
    def loss(self, model: Callable[[torch.Tensor], Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The micro batch's mean loss through `model` (the strategy's wrapper)."""
        ...

    def metrics(self) -> dict[str, float]:
        """This rank's means of the objective's own metrics over the micro batches since the last call."""
        ...


class NextToken:
    """The next-token cross-entropy: streamed over chunks of `loss_chunk` tokens (`models.loss.token_logps`),
    or with `loss_chunk=0` the family's own loss of the whole logits; with a mixture of experts, its router's
    balancing term and metrics (`RouterMetrics`)."""

    def __init__(self, spec: ModelSpec, loss_chunk: int = 0, router: RouterMetrics | None = None) -> None:
        self.spec, self.loss_chunk, self.router = spec, loss_chunk, router

    def loss(self, model: Callable[..., Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        options = {"output_router_logits": True} if self.router else {}
        if self.loss_chunk:
            output = model(inputs, targets=targets, loss_chunk=self.loss_chunk, **options)
            loss = mean_negative(logits(output), targets)
        else:
            output = model(inputs, **options)
            loss = self.spec.loss(output, targets)
        return loss + self.router.term(output) if self.router else loss

    def metrics(self) -> dict[str, float]:
        return self.router.metrics() if self.router else {}


class Preference:
    """DPO (`entrypoint.trainer.dpo_loss`) with the reference model's log-probabilities computed as it goes, or
    looked up after `precompute` (`trainer.dpo.precompute_reference`)."""

    def __init__(self, options: DpoConfig, reference: Callable[..., Any], loss_chunk: int = 0) -> None:
        self.options = options
        self.loss_chunk = loss_chunk
        self.reference: Callable[[torch.Tensor], Any] | None = reference
        self.precomputed: dict[bytes, float] = {}
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def loss(self, model: Callable[[torch.Tensor], Any], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        policy = self._completions(model, inputs, targets)
        reference = self._reference_logps(inputs, targets).to(policy.logps.device)
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

    def precompute(self, micro_batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The reference's log-probability of every row of `micro_batches` (this rank's share of the pairs; every
        rank runs as many micro batches, as sharded models need), gathered from every rank, and the reference
        model let go: each later row is looked up by its tokens."""
        found: dict[bytes, float] = {}
        for inputs, targets in micro_batches:
            found.update(zip(_row_keys(inputs, targets), self._reference_logps(inputs, targets).tolist(), strict=True))
        shares: list[dict[bytes, float]] = [{} for _ in range(dist.get_world_size())]
        dist.all_gather_object(shares, found)
        self.precomputed = {key: value for share in shares for key, value in share.items()}
        self.reference = None

    def _reference_logps(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.reference is None:
            return torch.tensor([self.precomputed[key] for key in _row_keys(inputs, targets)])
        with torch.no_grad():
            return self._completions(self.reference, inputs, targets).logps

    def _completions(self, model: Callable[..., Any], inputs: torch.Tensor, targets: torch.Tensor) -> Completions:
        """Streamed over chunks of `loss_chunk` tokens (`models.loss.token_logps`), or from the whole logits."""
        if self.loss_chunk:
            return completions(logits(model(inputs, targets=targets, loss_chunk=self.loss_chunk)), targets)
        return completion_logps(logits(model(inputs)), targets)


def _row_keys(inputs: torch.Tensor, targets: torch.Tensor) -> list[bytes]:
    """A row's identity: a digest of its inputs and targets (equal rows have equal reference log-probabilities)."""
    rows = torch.cat([inputs, targets], dim=1).cpu().numpy()
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


def logits(output: Any) -> torch.Tensor:
    """A family's output: the logits themselves, or transformers' output holding them."""
    return output if isinstance(output, torch.Tensor) else output.logits


def make_objective(
    plan: Plan, spec: ModelSpec, model: nn.Module, frozen_copy: Callable[[nn.Module], nn.Module] | None = None
) -> TrainingObjective:
    """The plan's objective for `model` (this rank's module). Without LoRA the reference is `frozen_copy(model)`:
    the strategy's (FSDP2 shards it as it shards the model), by default a whole copy made before DDP wraps it."""
    chunk = plan.trainer.loss_chunk
    if plan.trainer.objective is Objective.sft:
        return NextToken(spec, chunk, RouterMetrics.of(model.get_base_model() if plan.model.lora.rank else model))
    if plan.model.lora.rank:
        return Preference(plan.trainer.dpo, _without_adapters(model), chunk)
    copied = frozen_copy(model) if frozen_copy else copy.deepcopy(model)
    return Preference(plan.trainer.dpo, copied.eval().requires_grad_(False), chunk)


def _without_adapters(model: nn.Module) -> Callable[..., Any]:
    """The base model: the peft model with its adapters disabled for the length of one forward pass."""

    def reference(inputs: torch.Tensor, **options: Any) -> Any:
        with model.disable_adapter():
            return model(inputs, **options)

    return reference
