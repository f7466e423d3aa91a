"""What the trainer's loop calls to find a bad node, a slow rank and a hang: the health check before
training (`health`), the injected faults of a test (`faults`), the hang watchdog (`hangs`) and the straggler
detector (`stragglers`), behind four calls: `Guards.start`, `time_compute`, `before_step` and `after_step`."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.distributed as dist

from compiler.spec import Plan
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer import health
from entrypoint.trainer.engines.base import Engine
from entrypoint.trainer.faults import Faults, injected
from entrypoint.trainer.hangs import Watchdog, is_timeout
from entrypoint.trainer.metrics import MetricsSink
from entrypoint.trainer.stragglers import Stragglers, timed_modules

_active: Watchdog | None = None
"""This process's watchdog, for `named_hangs` (one trainer per process)."""


def node_hosts(plan: Plan) -> list[str]:
    """Every node's name, by node rank."""
    names: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(names, health.this_node(plan).host)
    return [str(names[node * plan.layout.processes_per_node]) for node in range(plan.layout.nodes)]


class Guards:
    def __init__(self, plan: Plan, device: torch.device, timeout_s: float, faults: Faults, hosts: list[str]) -> None:
        global _active
        self.faults, self.rank = faults, dist.get_rank()
        trainer = plan.trainer
        self.watchdog = _active = Watchdog(plan, hosts, timeout_s)
        per_node = plan.layout.processes_per_node
        self.stragglers = Stragglers(
            trainer.straggler_every, trainer.straggler_factor, trainer.straggler_windows, hosts, per_node, device
        )
        self.every = trainer.straggler_every

    @classmethod
    def start(
        cls, plan: Plan, paths: Paths, device: torch.device, timeout_s: float, skip_check: str | None = None
    ) -> "Guards":
        """The health check (when `trainer.health_check`, unless `skip_check` says why not; rank 0 prints its
        lines), then the guards."""
        faults = injected()
        if plan.trainer.health_check:
            lines = (
                [f"health check      skipped: {skip_check}"]
                if skip_check
                else health.check(plan, paths, device, faults)
            )
            if dist.get_rank() == 0:
                print("\n".join(lines), flush=True)
        return cls(plan, device, timeout_s, faults, node_hosts(plan))

    def time_compute(self, plan: Plan, engine: Engine) -> None:
        """The straggler detector times the forward passes of the engine's blocks (`stragglers`)."""
        self.stragglers.attach(timed_modules(plan, engine.parts))

    def before_step(self, step: int) -> None:
        self.faults.before_step(self.rank, step)
        self.watchdog.reached(step)

    def after_step(self, done_steps: int, sinks: Sequence[MetricsSink]) -> None:
        """Every `straggler_every` steps (a collective): name the stragglers in the log and the metrics when they
        change."""
        named = self.stragglers.end(done_steps)
        if named is None or self.rank != 0:
            return
        text = "; ".join(map(str, named)) or "none any more"
        print(f"stragglers after step {done_steps} (windows of {self.every} steps): {text}", flush=True)
        for sink in sinks:
            sink.write({"step": done_steps, "stragglers": [straggler.to_json() for straggler in named]})

    def close(self) -> None:
        global _active
        self.watchdog.close()
        _active = None


@contextmanager
def named_hangs() -> Iterator[None]:
    """A collective's timeout becomes a CollectiveTimeoutError naming the ranks that did not reach it."""
    try:
        yield
    except RuntimeError as error:
        if _active is None or not is_timeout(error):
            raise
        raise _active.timed_out(error) from error
