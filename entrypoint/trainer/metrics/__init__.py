"""Where the trainer's metrics records go: the trackers `trainer.trackers` names, each opened by the first
rank with a `TrackedRun` (the plan, the job's output folder, the run id). A record is a flat dict (step, loss,
lr, grad_norm, tokens_per_s, step_s, mfu, memory_gib, elapsed_s, and val_loss where the trainer evaluates).

A tracker that fails (a server that is down, a missing client) costs one warning and its own records, never
the run: jsonl, always on, keeps every record.

Adding a sink: a class with `write`, `write_samples` (the completions of `trainer.sample_prompts`, as the
tracker shows text) and `close` (which tells the tracker how the run ended, a `RunEnd`, in the
tracker's own terms) whose constructor takes a `TrackedRun`, its name here in `SINKS`, the same name in
`compiler.spec.contract.TRACKERS` (which the planner checks `trainer.trackers` against), and its client's pin in
the image (`compiler.planner.image_rules.TRACKER_PINS`).
"""

import sys
from collections.abc import Callable
from typing import Any

from compiler.spec.contract import ALWAYS_ON_TRACKER
from entrypoint.trainer.metrics.base import MetricsSink, RunEnd, Sample, TrackedRun
from entrypoint.trainer.metrics.jsonl import JsonlSink
from entrypoint.trainer.metrics.mlflow_sink import MlflowSink
from entrypoint.trainer.metrics.tensorboard_sink import TensorBoardSink
from entrypoint.trainer.metrics.wandb_sink import WandbSink

SINKS: dict[str, Callable[[TrackedRun], MetricsSink]] = {
    "jsonl": JsonlSink,
    "tensorboard": TensorBoardSink,
    "mlflow": MlflowSink,
    "wandb": WandbSink,
}
"""`trainer.trackers` name → the sink, built from the tracked run."""


class Tolerated:
    """A tracker whose failure is not the run's: the first exception is one warning on stderr, and the
    tracker gets no further records."""

    def __init__(self, name: str, sink: MetricsSink | None = None) -> None:
        self.name, self.sink = name, sink

    def fail(self, error: BaseException) -> None:
        print(
            f"dockyard: warning: the {self.name} tracker failed and is left out for the rest of the run "
            f"(metrics go on to metrics.jsonl): {type(error).__name__}: {error}",
            file=sys.stderr,
            flush=True,
        )
        self.sink = None

    def write(self, record: dict[str, Any]) -> None:
        self._call("write", record)

    def write_samples(self, samples: list[Sample]) -> None:
        self._call("write_samples", samples)

    def close(self, end: RunEnd) -> None:
        self._call("close", end)

    def _call(self, method: str, argument: Any) -> None:
        if self.sink is not None:
            try:
                getattr(self.sink, method)(argument)
            except Exception as error:
                self.fail(error)


def open_sinks(names: list[str], run: TrackedRun) -> list[MetricsSink]:
    """The sinks of `names`: jsonl as it is (its failure is the run's), every other one tolerated."""
    sinks: list[MetricsSink] = []
    for name in names:
        if name == ALWAYS_ON_TRACKER:
            sinks.append(SINKS[name](run))
            continue
        tolerated = Tolerated(name)
        try:
            tolerated.sink = SINKS[name](run)
        except Exception as error:
            tolerated.fail(error)
        sinks.append(tolerated)
    return sinks


__all__ = ["SINKS", "MetricsSink", "RunEnd", "Sample", "TrackedRun", "open_sinks"]
