"""Expert parallelism (`parallelism.ep`) for transformers' mixture-of-experts modules, as torchtitan does it.

The fused experts of each MoE layer (`gate_up_proj` `[experts, 2·ffn, hidden]`, `down_proj`) are split by
their first dimension over the `ep` ranks of an expert-parallel group: each rank keeps `experts / ep` of them
(FSDP2 then shards those over the remaining data-parallel ranks, `efsdp`). A layer's forward stays
transformers' router; the experts' forward becomes a dispatch: each rank's (token, expert) choices are sorted
by expert, the per-expert counts then the tokens go to the experts' ranks (`all_to_all_single`, with autograd),
transformers' own experts forward runs its grouped GEMM on the tokens received for the rank's local experts,
and the results come back the same way and are weighted and summed per token. No token is dropped: the
splits are the exact counts.

The gradient of a rank's experts sums every rank's tokens through the all-to-all's backward, and FSDP2
averages it only over `efsdp`: the engine divides it by `ep` more, for the mean the other parameters get.
"""

from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.nn.functional import all_to_all_single
from torch.distributed.tensor import DTensor

from compiler.spec.contract import EXPERT_LOAD_IMBALANCE, MOE_AUX_LOSS

EXPERT_OFFSET = "dockyard_expert_offset"
"""The experts module's attribute: the first expert (of the whole layer's) that this rank holds."""
EXPERT_SHARDS = "dockyard_expert_shards"
"""An expert parameter's attribute: how many expert-parallel ranks hold different experts of it."""
EXPERT_WEIGHTS = ("gate_up_proj", "down_proj")


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """transformers' fused experts modules (one per MoE layer): `num_experts` and 3-d expert weights."""
    return [
        part
        for part in model.modules()
        if hasattr(part, "num_experts")
        and all(isinstance(getattr(part, weight, None), nn.Parameter) for weight in EXPERT_WEIGHTS)
    ]


def held_rows(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The rows of a tensor this rank holds (an FSDP2 shard's local tensor, or the tensor) and the first row's
    index in the whole tensor."""
    if not isinstance(tensor, DTensor):
        return tensor, 0
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    _, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return tensor.to_local(), offset[0]


def split_experts(model: nn.Module, group: dist.ProcessGroup) -> list[nn.Module]:
    """Keep this rank's `experts / ep` experts of every MoE layer and dispatch tokens to them over `group`
    (the expert-parallel ranks); the experts modules, for FSDP2 to shard on their own mesh."""
    ep, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = expert_modules(model)
    for part in parts:
        if part.num_experts % ep:
            raise ValueError(f"{part.num_experts} experts do not split over parallelism.ep={ep} ranks")
        local = part.num_experts // ep
        for weight in EXPERT_WEIGHTS:
            whole = getattr(part, weight)
            kept = whole.detach()[rank * local : (rank + 1) * local].clone()
            setattr(part, weight, nn.Parameter(kept, requires_grad=whole.requires_grad))
        part.num_experts = local
        setattr(part, EXPERT_OFFSET, rank * local)
        part.forward = partial(dispatched, part.forward, group, local)
    return parts


def dispatched(
    experts, group: dist.ProcessGroup, local: int, hidden: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """`experts` (transformers' forward of this rank's `local` experts) on every rank's tokens routed to them;
    `hidden` `[tokens, hidden]`, `chosen` and `weights` `[tokens, top_k]` are this rank's, as the router gave."""
    ep, top_k = dist.get_world_size(group), chosen.shape[-1]
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tokens = order // top_k
    counts = torch.bincount(flat, minlength=local * ep)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)  # from each rank: its tokens for each local expert
    sent_splits = counts.view(ep, local).sum(dim=1).tolist()
    received_splits = received.view(ep, local).sum(dim=1).tolist()
    arriving = _exchange(hidden[tokens], received_splits, sent_splits, group)
    local_ids = torch.repeat_interleave(torch.arange(local, device=flat.device).repeat(ep), received)
    ones = torch.ones(local_ids.shape[0], 1, dtype=hidden.dtype, device=hidden.device)
    computed = experts(arriving, local_ids.unsqueeze(-1), ones)
    returned = _exchange(computed, sent_splits, received_splits, group)
    weighted = returned * weights.reshape(-1)[order].unsqueeze(-1).to(returned.dtype)
    return torch.zeros_like(hidden).index_add(0, tokens, weighted.to(hidden.dtype))


def _exchange(rows: torch.Tensor, output_splits: list[int], input_splits: list[int], group) -> torch.Tensor:
    """Rows to their ranks (autograd's all_to_all_single: the backward sends gradients back the same way)."""
    output = rows.new_empty((sum(output_splits), *rows.shape[1:]))
    return all_to_all_single(output, rows.contiguous(), output_splits, input_splits, group=group)


def expert_lines(model: nn.Module, ep: int, lora_targets: list[str] | None) -> list[str]:
    """What the run's first lines say about a mixture of experts (nothing for a model without): how its experts
    are split, and with LoRA what is adapted and that the experts are not."""
    parts = expert_modules(model)
    if not parts:
        return []
    local = parts[0].num_experts
    lines = [f"experts           {local * ep} per MoE layer × {len(parts)} layers, ep {ep}: {local} per rank"]
    if lora_targets:
        adapted = ", ".join(lora_targets)
        lines.append(f"lora on experts   adapts {adapted}; the experts' fused weights and the routers stay frozen")
    return lines


class RouterMetrics:
    """A mixture of experts' routing, for `objective.NextToken`: the router's load-balancing loss
    (transformers' `aux_loss`) joins the loss times `router_aux_loss_coef` when the checkpoint's config says
    `output_router_logits` (as transformers trains it), and every micro batch's balancing loss and expert load
    imbalance are logged either way."""

    def __init__(self, config) -> None:
        self.coefficient = config.router_aux_loss_coef if config.output_router_logits else 0.0
        self.top_k = config.num_experts_per_tok
        self.sums: dict[str, float] = {}
        self.count = 0

    @staticmethod
    def of(model: nn.Module) -> "RouterMetrics | None":
        """The model's router metrics; None for a model without experts."""
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "router_aux_loss_coef") or not expert_modules(model):
            return None
        return RouterMetrics(config)

    def term(self, output) -> torch.Tensor:
        """The loss's balancing term for a forward's `output` (run with `output_router_logits=True`)."""
        imbalance = load_imbalance(output.router_logits, self.top_k)
        for name, value in ((MOE_AUX_LOSS, output.aux_loss), (EXPERT_LOAD_IMBALANCE, imbalance)):
            self.sums[name] = self.sums.get(name, 0.0) + float(value.detach())
        self.count += 1
        return self.coefficient * output.aux_loss

    def metrics(self) -> dict[str, float]:
        means = {name: total / max(self.count, 1) for name, total in self.sums.items()}
        self.sums, self.count = {}, 0
        return means


def load_imbalance(router_logits: tuple[torch.Tensor, ...], top_k: int) -> torch.Tensor:
    """The busiest expert's tokens over the mean, in the worst layer, counted over every rank's tokens (every
    rank calls it: one all-reduce of the counts)."""
    counts = torch.stack(
        [
            torch.bincount(logits.topk(top_k, dim=-1).indices.reshape(-1), minlength=logits.shape[-1]).float()
            for logits in router_logits
        ]
    )
    if dist.is_initialized():
        dist.all_reduce(counts)
    return (counts.max(dim=1).values / counts.mean(dim=1).clamp(min=1e-9)).max()
