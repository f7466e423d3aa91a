"""Stragglers: every `trainer.straggler_every` steps the ranks share how long their steps took, and a rank
slower than `trainer.straggler_factor` × the median for `trainer.straggler_windows` windows in a row is named
(node, rank, ratio) in the log, the metrics and `dockyard status`.

A step's wall time is the same on every rank: each waits for the slowest inside the forward/backward, whose
collectives (DDP's buffer broadcast and gradient reduction, FSDP's gathers) sync them. So a rank's time is
the rest of its steps, which it computes alone: the step's start and the optimizer update after the
gradients are reduced (under DDP; ZeRO's and FSDP's updates hold collectives too, which narrows the ratios).
"""

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: int
    host: str
    ratio: float

    def to_json(self) -> dict:
        return {"rank": self.rank, "node": self.node, "host": self.host, "ratio": round(self.ratio, 2)}

    def __str__(self) -> str:
        return f"node {self.node} ({self.host}) rank {self.rank}, {self.ratio:.2f}× the median step time"


def ratios(times: Sequence[float]) -> list[float]:
    """Each rank's time over the median of all ranks'."""
    median = statistics.median(times)
    return [time / median if median > 0 else 1.0 for time in times]


@dataclass
class Detector:
    """Counts, per rank, the windows in a row where it was slower than `factor` × the median."""

    factor: float
    windows: int
    streaks: dict[int, int] = field(default_factory=dict)

    def update(self, times: Sequence[float]) -> dict[int, float]:
        """The ranks slow for `windows` windows in a row, with this window's ratio."""
        named = {}
        for rank, ratio in enumerate(ratios(times)):
            self.streaks[rank] = self.streaks.get(rank, 0) + 1 if ratio > self.factor else 0
            if self.streaks[rank] >= self.windows:
                named[rank] = ratio
        return named


class StepClock:
    """This rank's local time per window: the parts of each step no other rank takes part in."""

    def __init__(self) -> None:
        self.window_s = 0.0
        self.since: float | None = None

    def resume(self) -> None:
        self.since = time.perf_counter()

    def pause(self) -> None:
        if self.since is not None:
            self.window_s += time.perf_counter() - self.since
        self.since = None

    def share(self, device: torch.device) -> list[float]:
        """Every rank's local time over the window (a collective: every rank calls it), then a new window."""
        times = torch.zeros(dist.get_world_size(), device=device, dtype=torch.float64)
        times[dist.get_rank()] = self.window_s
        dist.all_reduce(times)
        self.window_s = 0.0
        return times.tolist()


class Stragglers:
    """The trainer's side: time each step, compare every `every` steps, and say who is slow when that changes."""

    def __init__(self, every: int, factor: float, windows: int, hosts: list[str], per_node: int) -> None:
        self.every, self.hosts, self.per_node = every, hosts, per_node
        self.detector = Detector(factor, windows)
        self.clock = StepClock() if every else None
        self.named: list[Straggler] = []

    def resume(self) -> None:
        if self.clock:
            self.clock.resume()

    def pause(self) -> None:
        if self.clock:
            self.clock.pause()

    def end(self, done_steps: int, device: torch.device) -> list[Straggler] | None:
        """After a step: the stragglers when this window changed who they are, else None."""
        if self.clock is None:
            return None
        self.clock.pause()
        if done_steps % self.every:
            return None
        slow = self.detector.update(self.clock.share(device))
        named = [
            Straggler(rank, rank // self.per_node, self.hosts[rank // self.per_node], r) for rank, r in slow.items()
        ]
        changed = [s.rank for s in named] != [s.rank for s in self.named]
        self.named = named
        return named if changed else None
