"""Throughput, model FLOPs utilisation and memory, written as JSON lines."""

import json
import resource
import sys
from pathlib import Path
from typing import Any, TextIO

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


class MetricsLog:
    """One JSON object per line, to stdout (the job's log, where SageMaker's metric regexes look) and to a file."""

    def __init__(self, path: Path, stream: TextIO = sys.stdout) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a")
        self.stream = stream

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=False)
        print(line, file=self.stream, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
