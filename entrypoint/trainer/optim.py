"""The optimizer, its learning-rate schedule, and gradient clipping over sharded gradients."""

import math

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from compiler.spec import Derived
from compiler.spec.schema import LrSchedule, TrainerConfig
from entrypoint.trainer.models.experts import EXPERT_SHARDS


def adamw(model: nn.Module, trainer: TrainerConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms, biases), as the HF Trainer groups them."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": trainer.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (trainer.adam_beta1, trainer.adam_beta2)
    return torch.optim.AdamW(groups, lr=trainer.lr, betas=betas, eps=trainer.adam_epsilon, foreach=False)


def lr_at(step: int, trainer: TrainerConfig, derived: Derived) -> float:
    """The learning rate of optimizer step `step` (0-based): the peak `derived.lr` × the schedule's factor at
    that step. Every schedule but cosine_to_min is transformers' lambda of the same name, term for term (the
    Trainer steps its scheduler after each optimizer step, so step s runs at lambda(s))."""
    peak, warmup, steps, floor = derived.lr, derived.warmup_steps, trainer.steps, trainer.min_lr_ratio
    schedule = trainer.lr_schedule
    if schedule is LrSchedule.cosine_to_min:
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - 1 - warmup)
        shape = 0.5 * (1 + math.cos(math.pi * progress))
        return peak * (floor + (1 - floor) * shape)
    if schedule is LrSchedule.constant:
        return peak
    if schedule is LrSchedule.wsd:
        return peak * _warmup_stable_decay(
            step, warmup, steps - warmup - trainer.decay_steps, trainer.decay_steps, floor
        )
    if step < warmup:
        return peak * (step / max(1, warmup))
    if schedule is LrSchedule.constant_with_warmup:
        return peak
    if schedule is LrSchedule.linear:
        return peak * max(0.0, (steps - step) / max(1, steps - warmup))
    progress = (step - warmup) / max(1, steps - warmup)
    factor = 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule is LrSchedule.cosine_with_min_lr:
        factor = factor * (1 - floor) + floor
    return peak * max(0.0, factor)


def _warmup_stable_decay(step: int, warmup: int, stable: int, decay: int, floor: float) -> float:
    """transformers' warmup_stable_decay factor with its default shapes: linear warm-up, cosine decay."""
    if step < warmup:
        return max(0.0, step / max(1, warmup) * (1.0 - floor) + floor)
    if step < warmup + stable:
        return 1.0
    if step < warmup + stable + decay:
        progress = (step - warmup - stable) / max(1, decay)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - floor) + floor)
    return floor


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def grad_norm(params: list[nn.Parameter], stage_ranks: int | None = None) -> float:
    """The L2 norm of all gradients, whatever mix of plain, FSDP-sharded and tensor-parallel ones.

    A DTensor gradient's local shard is repeated on every rank of the mesh dimensions it is replicated
    over, and on ranks outside its mesh (a tensor-parallel rank's copy of a data-parallel-only parameter);
    dividing its squared norm by that count and summing over the world counts each element once.
    Counting Replicate placements, not Shard ones, also covers FSDP's strided shards over TP. An expert-parallel
    parameter's ranks outside its mesh hold other experts (`models.experts.EXPERT_SHARDS`), not copies.
    Plain tensors (DDP) are identical on every rank and stay local. Under a pipeline each stage's
    parameters live on its `stage_ranks` ranks only, so copies are counted among those, and the sum over
    the world adds the stages' squares.
    """
    world = dist.get_world_size() if dist.is_initialized() else 1
    holders = stage_ranks or world
    sharded: list[torch.Tensor] = []
    plain: list[torch.Tensor] = []
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        if isinstance(grad, DTensor):
            copies = holders // grad.device_mesh.size() // getattr(param, EXPERT_SHARDS, 1)
            for size, placement in zip(grad.device_mesh.shape, grad.placements, strict=True):
                if placement.is_replicate():
                    copies *= size
            sharded.append(grad.to_local().detach().float().pow(2).sum() / copies)
        else:
            plain.append(grad.detach().float().pow(2).sum())
    total = torch.stack(plain).sum() if plain else None
    if sharded:  # every rank has DTensor gradients or none: the same strategy runs everywhere
        across = torch.stack(sharded).sum()
        if world > 1:
            dist.all_reduce(across)
        total = across if total is None else total + across
    return 0.0 if total is None else math.sqrt(total.item())


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> float:
    """Scale the gradients so their norm is at most `max_norm` (0: no clipping); the norm before."""
    norm = grad_norm(params)
    scale_gradients(params, max_norm, norm)
    return norm


def scale_gradients(params: list[nn.Parameter], max_norm: float, norm: float) -> None:
    """Scale gradients whose norm is `norm` down to `max_norm` (0: no clipping)."""
    if max_norm > 0 and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for param in params:
            if param.grad is not None:
                param.grad.mul_(scale)
