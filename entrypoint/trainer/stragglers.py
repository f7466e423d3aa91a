"""Stragglers: every `trainer.straggler_every` steps the ranks share how fast they computed, and a rank
slower than `trainer.straggler_factor` × the median for `trainer.straggler_windows` windows in a row is named
(node, rank, ratio) in the log, the metrics and `dockyard status`.

What is measured: each rank's mean wall time per forward pass of one of its transformer blocks
(`ModelSpec.blocks`, every micro batch's, and the recomputation under activation checkpointing), from a
forward pre-hook to a forward hook on each block. On GPUs the hooks record CUDA events on the compute
stream, so the time is the stream's between the block's first and last kernel (launch gaps of a slow host
included), read when the ranks share it; on CPU it is `time.perf_counter`. A step's wall time would not do:
it is the same on every rank, since each waits for the slowest in the step's collectives. Nor would CPU
time: a throttled container (a cgroup CPU quota) gets the same CPU seconds over more wall time.

Where that time is the rank's own (a waiting rank does not look slow):
- DDP, ZeRO-1 and 2: a block's forward holds no collective (DDP broadcasts buffers before the model's
  forward and reduces gradients during the backward, which is not timed).
- FSDP2 (also a pipeline's stages): a block's all-gather is waited for in FSDP's pre-forward hook, which
  runs before this one (FSDP prepends its hook), and its reshard after this one's forward hook (prepended).
  The gather itself is not timed, only the compute on the gathered weights.
- Pipelines: the stages' sends and receives happen between the stages' forwards, outside the blocks.
- Per block, not per rank: pipeline stages of unequal layer counts compare evenly.
- `trainer.compile=blocks`: the hooks run outside each block's graph (`torch.compiler.disable`).

Where it is not:
- Tensor parallelism: a block's forward holds the tensor-parallel group's all-reduces, so a slow rank's
  whole group looks slow. The group is within one node (the mesh puts tp innermost), so the slow node is
  still named, with all its ranks in that group.
- ZeRO-3: DeepSpeed gathers each layer's parameters in hooks inside the block, so waits for a slow peer
  count and the ratios come out smaller.
- `trainer.compile=model`: a hook inside the compiled model would split its graph at every block, so each
  model part is timed whole, which under FSDP holds the blocks' gathers (ratios smaller, as under ZeRO-3).
- The backward, the optimizer's update and the data are not timed: a node slow only there is not seen.
"""

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from compiler.spec import Plan
from compiler.spec.schema import Compile
from entrypoint.trainer.models import model_spec


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: int
    host: str
    ratio: float

    def to_json(self) -> dict:
        return {"rank": self.rank, "node": self.node, "host": self.host, "ratio": round(self.ratio, 2)}

    def __str__(self) -> str:
        return f"node {self.node} ({self.host}) rank {self.rank}, {self.ratio:.2f}× the median compute time"


def ratios(times: Sequence[float]) -> list[float]:
    """Each rank's time over the median of all ranks'."""
    median = statistics.median(times)
    return [time / median if median > 0 else 1.0 for time in times]


def per_call(seconds: float, calls: int) -> float:
    """The mean time of one timed forward pass; 0 when none ran (nobody is slow for it)."""
    return seconds / calls if calls else 0.0


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


def timed_modules(plan: Plan, parts: Sequence[nn.Module]) -> list[nn.Module]:
    """The modules whose forward passes are timed: the blocks of an engine's `parts`, or the parts themselves
    when torch.compile compiled them whole (a hook stays out of the graph: one per block would cut it at
    every block; the pipeline engine compiles nothing)."""
    if Compile(plan.trainer.compile) is Compile.model and plan.layout.pp == 1:
        return list(parts)
    spec = model_spec(plan.model)
    return [block for part in parts for block in spec.blocks(part)]


class ComputeClock:
    """This rank's forward time of the modules it is attached to, over a window: hooks around each."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.on_gpu = device, device.type == "cuda"
        self.started: float | torch.cuda.Event | None = None
        self.spans: list[tuple] = []
        """(start, end) of each timed forward since the last window: CUDA events on GPUs, else seconds."""

    def attach(self, modules: Iterable[nn.Module]) -> None:
        """Hooks that a compiled module runs outside its graph (made here: `torch.compiler.disable` imports
        dynamo, which must not happen before `compiled.use_warm_cache` has set inductor's folders)."""
        enter, leave = torch.compiler.disable(self._enter), torch.compiler.disable(self._leave)
        for module in modules:
            module.register_forward_pre_hook(enter)  # after FSDP's, which waits for the gather
            module.register_forward_hook(leave, prepend=True)  # before FSDP's reshard

    def _now(self) -> float | torch.cuda.Event:
        if not self.on_gpu:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _enter(self, module: nn.Module, args: tuple) -> None:
        self.started = self._now()

    def _leave(self, module: nn.Module, args: tuple, output: object) -> None:
        if self.started is not None:
            self.spans.append((self.started, self._now()))
            self.started = None

    def window(self) -> float:
        """The mean time of one timed forward since the last window (on GPUs once the stream has passed them)."""
        if self.on_gpu and self.spans:
            self.spans[-1][1].synchronize()
            seconds = sum(start.elapsed_time(end) for start, end in self.spans) / 1000
        else:
            seconds = sum(end - start for start, end in self.spans)
        mean = per_call(seconds, len(self.spans))
        self.spans.clear()
        return mean

    def share(self) -> list[float]:
        """Every rank's `window()` (a collective: every rank calls it)."""
        times = torch.zeros(dist.get_world_size(), dtype=torch.float64, device=self.device)
        times[dist.get_rank()] = self.window()
        dist.all_reduce(times)
        return times.tolist()


class Stragglers:
    """The trainer's side: time the blocks, compare every `every` steps, and say who is slow when that changes."""

    def __init__(
        self, every: int, factor: float, windows: int, hosts: list[str], per_node: int, device: torch.device
    ) -> None:
        self.every, self.hosts, self.per_node = every, hosts, per_node
        self.detector = Detector(factor, windows)
        self.clock = ComputeClock(device) if every else None
        self.named: list[Straggler] = []

    def attach(self, modules: Iterable[nn.Module]) -> None:
        if self.clock:
            self.clock.attach(modules)

    def end(self, done_steps: int) -> list[Straggler] | None:
        """After a step: the stragglers when this window changed who they are, else None."""
        if self.clock is None or done_steps % self.every:
            return None
        slow = self.detector.update(self.clock.share())
        named = [
            Straggler(rank, rank // self.per_node, self.hosts[rank // self.per_node], r) for rank, r in slow.items()
        ]
        changed = [s.rank for s in named] != [s.rank for s in self.named]
        self.named = named
        return named if changed else None
