"""A job's log as `dockyard logs` shows it on every target: lines from all nodes, each with its node and the
time its node wrote it, merged in time order as `kubectl logs --prefix` would show them side by side."""

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class LogLine:
    node: str
    """The node that wrote it; empty for the job's own lines (Slurm's batch script), shown as they are."""
    text: str
    time: float | None = None
    """Seconds since the epoch, where the platform stamps lines (a single file that all nodes write in
    turn, Slurm's, is in time order already and has none)."""

    def __str__(self) -> str:
        return f"{self.node} | {self.text}" if self.node else self.text


def merged(streams: Iterable[list[LogLine]]) -> list[LogLine]:
    """Each node's lines (in its own order) interleaved by time; equal times keep the streams' order."""
    return list(heapq.merge(*streams, key=lambda line: line.time or 0.0))


def split_timestamp(line: str) -> tuple[float | None, str]:
    """`2026-11-25T23:00:30.123456789Z text` (Docker's and the kubelet's `--timestamps` form) as its time
    and its text; a line without one as (None, the line)."""
    stamp, _, text = line.partition(" ")
    if "T" not in stamp or not stamp.endswith("Z"):
        return None, line
    try:
        return datetime.fromisoformat(stamp).timestamp(), text
    except ValueError:
        return None, line


def stamped(text: str, time: float) -> str:
    """`text` in the same form, as the local target keeps a node's log."""
    return f"{datetime.fromtimestamp(time, UTC).isoformat(timespec='microseconds').replace('+00:00', 'Z')} {text}"
