"""`DOCKYARD_FAULT`: a testing aid that injects a fault into a run, to see how dockyard reports it. Never set it
on a real run. Comma-separated items:

- `stall:RANK@STEP`: rank RANK stops before its forward/backward of step STEP (counted from 0) and never
  calls another collective, like a rank stuck in its data loader: the others time out (a hang).
- `unhealthy:HOST`: the health check on node HOST expects one GPU more than the plan says, like a node that
  lost a device.
"""

import os
import re
import time
from dataclasses import dataclass, field

VARIABLE = "DOCKYARD_FAULT"
ITEM = re.compile(r"stall:(?P<stall>\d+)@(?P<step>\d+)|unhealthy:(?P<host>\S+)")


@dataclass(frozen=True)
class Faults:
    stalls: dict[int, int] = field(default_factory=dict)
    """Rank -> the step it stops at."""
    unhealthy: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> "Faults":
        stalls, hosts = {}, set()
        for item in filter(None, (part.strip() for part in text.split(","))):
            match = ITEM.fullmatch(item)
            if match is None:
                raise ValueError(f"{VARIABLE}: '{item}' is not stall:RANK@STEP or unhealthy:HOST")
            if match["stall"] is not None:
                stalls[int(match["stall"])] = int(match["step"])
            else:
                hosts.add(match["host"])
        return cls(stalls, frozenset(hosts))

    def before_step(self, rank: int, step: int) -> None:
        """Where the injected stall happens: before the step's first collective."""
        if self.stalls.get(rank, -1) == step:
            print(f"{VARIABLE}: rank {rank} stops before step {step}", flush=True)
            while True:
                time.sleep(60)


def injected() -> Faults:
    return Faults.parse(os.environ.get(VARIABLE, ""))
