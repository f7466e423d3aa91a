"""Where the trainer's metrics records go: the sinks `trainer.metrics` names, each opened by the first
rank with the job's output folder. A record is a flat dict (step, loss, lr, grad_norm, tokens_per_s,
step_s, mfu, memory_gib, elapsed_s).

Adding a sink: a class with `write` and `close` taking the output folder, its name here in `SINKS`, and
the same name in `compiler.spec.contract.METRICS_SINKS` (which the planner checks `trainer.metrics` against).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from entrypoint.trainer.metrics.jsonl import JsonlSink


class MetricsSink(Protocol):
    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


SINKS: dict[str, Callable[[Path], MetricsSink]] = {"jsonl": JsonlSink}
"""`trainer.metrics` name → the sink, built from the output folder."""


def open_sinks(names: list[str], output: Path) -> list[MetricsSink]:
    return [SINKS[name](output) for name in names]
