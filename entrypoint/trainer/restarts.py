"""What the trainer says about an in-job restart (`trainer.restarts`): torchrun restarted the workers after a
rank died, and this attempt resumes from the newest complete checkpoint.

Rank 0 notes the step it has reached (a file beside the checkpoints, replaced after each step), so that the
attempt after a restart can say how many steps were lost, and appends one JSON line per restart to the job's
output folder (`RESTARTS_FILE`), which the run's record counts. The cause is in the log of the node whose rank
died, where the entrypoint names it as torchrun restarts (`entrypoint.launcher.main`).
"""

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from compiler.spec.contract import RESTARTS_FILE

REACHED = "reached-step"
"""The file beside the checkpoints that holds the last step rank 0 finished."""


def attempt(device: torch.device) -> int:
    """How many times torchrun has restarted the workers of this job (0 in the first attempt), the same on
    every rank: each node's agent counts only the restarts its own workers' failures caused (the other nodes
    restart theirs to rejoin without counting), so the ranks take the highest count (one scalar all-reduce)."""
    count = torch.tensor(float(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def note_reached(checkpoints: Path, step: int) -> None:
    checkpoints.mkdir(parents=True, exist_ok=True)
    partial = checkpoints / f".{REACHED}.tmp"
    partial.write_text(f"{step}\n")
    partial.replace(checkpoints / REACHED)


def reached(checkpoints: Path) -> int | None:
    try:
        return int((checkpoints / REACHED).read_text())
    except (FileNotFoundError, ValueError):
        return None


def record_restart(checkpoints: Path, output: Path, count: int, resumed: int, restarts: int) -> str:
    """Log and record this attempt's restart (the `count`th): from which checkpoint it resumes and what it
    lost."""
    last = reached(checkpoints)
    lost = None if last is None else max(0, last - resumed)
    event = {"restart": count, "of": restarts, "resumed_step": resumed, "reached_step": last, "steps_lost": lost}
    output.mkdir(parents=True, exist_ok=True)
    with (output / RESTARTS_FILE).open("a") as file:
        file.write(json.dumps(event) + "\n")
    lost_text = "unknown" if lost is None else str(lost)
    return (
        f"restart {count} of {restarts}: resumed from step {resumed} "
        f"(rank 0 had reached step {last if last is not None else '?'}); steps lost: {lost_text}"
    )
