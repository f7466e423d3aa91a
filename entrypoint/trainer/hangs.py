"""Hangs that say where: each rank marks in the c10d store the step whose collectives it is about to call,
and a watchdog thread per rank looks at the marks when a step has not ended within most of the collective
timeout. It then prints which ranks did not reach the step and every thread's Python stack (faulthandler),
on every rank, before the collective's timeout ends the job; the timeout's error is replaced by one that
names those ranks (the gloo backend raises it; NCCL's watchdog ends the process, and the entrypoint sets
TORCH_NCCL_* so that NCCL's flight recorder is dumped to the output folder first).
"""

import faulthandler
import sys
import threading
import time

import torch.distributed as dist

from compiler.spec import Plan

WARN_AT = 0.8
"""The fraction of the collective timeout after which a step that has not ended counts as hanging."""
KEY = "dockyard/reached/{rank}"


class CollectiveTimeoutError(RuntimeError):
    """A collective timed out; the message names the ranks that did not reach it."""


class Watchdog:
    def __init__(self, plan: Plan, hosts: list[str], timeout_s: float) -> None:
        self.plan, self.hosts, self.timeout_s = plan, hosts, timeout_s
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.store = dist.distributed_c10d._get_default_store()
        self.step: int | None = None
        self.since = time.monotonic()
        self.wake = threading.Event()
        self.reported = False
        threading.Thread(target=self._watch, name="dockyard-watchdog", daemon=True).start()

    def reached(self, step: int) -> None:
        """This rank is about to call step `step`'s collectives."""
        self.store.set(KEY.format(rank=self.rank), str(step))
        self.step, self.since = step, time.monotonic()

    def close(self) -> None:
        self.step = None
        self.wake.set()

    def missing(self, step: int) -> str:
        """`rank 1 (node 1, algo-2) last reached step 2`, for each rank that has not reached `step`."""
        behind = []
        for rank in range(self.world):
            key = KEY.format(rank=rank)
            last = int(self.store.get(key)) if self.store.check([key]) else None
            if last is None or last < step:
                node = rank // self.plan.layout.processes_per_node
                shown = "no step" if last is None else f"step {last}"
                behind.append(f"rank {rank} (node {node}, {self.hosts[node]}) last reached {shown}")
        return "; ".join(behind) or "every rank reached it"

    def timed_out(self, error: BaseException) -> CollectiveTimeoutError:
        """The error to raise instead of a collective's timeout at the current step."""
        step = self.step if self.step is not None else -1
        return CollectiveTimeoutError(
            f"step {step}'s collectives timed out after {self.timeout_s:g} s: {self.missing(step)}"
        )

    def _watch(self) -> None:
        while not self.wake.wait(1.0):
            step = self.step
            if step is None or self.reported or time.monotonic() - self.since < WARN_AT * self.timeout_s:
                continue
            self.reported = True
            print(
                f"dockyard: rank {self.rank} has waited {time.monotonic() - self.since:.0f} s in step {step}: "
                f"{self.missing(step)}; the stacks of rank {self.rank}:",
                flush=True,
            )
            faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
            sys.stdout.flush()


def is_timeout(error: BaseException) -> bool:
    """A collective's timeout as gloo and the c10d store raise it."""
    text = str(error).lower()
    return "timed out" in text or "timeout" in text
