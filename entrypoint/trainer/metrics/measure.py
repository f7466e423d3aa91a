"""Model FLOPs utilisation and memory, measured for the metrics records."""

import resource

import torch

from compiler.spec import Plan


def mfu(plan: Plan, tokens_per_second: float) -> float | None:
    """The fraction of the GPUs' dense bf16 peak the model FLOPs reach (the planner's formula, resolved into the
    plan, so reported and predicted MFU share one definition); None on CPU (no peak figure)."""
    if not plan.instance.has_gpus:
        return None
    peak = plan.instance.peak_tflops(plan.parallelism.mixed_precision.value) * 1e12 * plan.layout.world_size
    return plan.derived.flops_per_token * tokens_per_second / peak


def memory_gib(device: torch.device) -> float:
    """Peak GPU memory allocated by this process, or its peak resident size on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
