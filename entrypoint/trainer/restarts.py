"""What the trainer says about an in-job restart (`trainer.restarts`): torchrun restarted the workers after a
rank died, and this attempt resumes from the newest complete checkpoint.

Rank 0 notes the step it has reached (a file beside the checkpoints, replaced after each step), so that the
attempt after a restart can say how many steps were lost. Each node keeps restart notes (`Paths.restart_notes`):
its local leader makes the folder when the job starts and marks there that the node passed the health check;
the node's entrypoint adds each worker failure it sees (`entrypoint.launcher.failures.note_failure`). After a
restart the ranks gather every node's failures, and rank 0 appends one JSON line per restart, with its cause
and the steps lost, to the job's output folder (`RESTARTS_FILE`), which the run's record counts.
"""

import json
import os
import re
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from compiler.spec import files
from compiler.spec.contract import RESTARTS_FILE
from entrypoint.launcher.failures import FAILURES_FILE

REACHED = "reached-step"
"""The file beside the checkpoints that holds the last step rank 0 finished."""
HEALTHY = "health-passed"
"""In a node's restart notes: the node passed the health check when this job started."""


def attempt(device: torch.device) -> int:
    """How many times torchrun has restarted the workers of this job (0 in the first attempt), the same on
    every rank: each node's agent counts only the restarts its own workers' failures caused (the other nodes
    restart theirs to rejoin without counting), so the ranks take the highest count (one scalar all-reduce)."""
    count = torch.tensor(float(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def begin(restarts: int, notes: Path, local_leader: bool, device: torch.device) -> int:
    """This attempt's restart count (0 without `trainer.restarts`). In the job's first attempt each node's
    notes start empty, whatever an earlier job of the run left there."""
    if not restarts:
        return 0
    count = attempt(device)
    if local_leader and not count:
        shutil.rmtree(notes, ignore_errors=True)
        notes.mkdir(parents=True)
    return count


def note_healthy(notes: Path) -> None:
    """This node passed the health check (or has none) in the job's first attempt."""
    (notes / HEALTHY).touch()


def health_check_skipped(count: int, notes: Path, local_leader: bool, device: torch.device) -> str | None:
    """Why an in-job restart skips the health check: the same nodes passed it when the job started (every
    node's mark, one scalar all-reduce). A node that failed it has no mark, so the restart its failure
    caused checks again."""
    if not count:
        return None
    healthy = torch.tensor(float(not local_leader or (notes / HEALTHY).is_file()), device=device)
    dist.all_reduce(healthy, op=dist.ReduceOp.MIN)
    return f"in-job restart {count} on the nodes that passed it when the job started" if healthy.item() else None


def failures(notes: Path, local_leader: bool) -> list[dict]:
    """Every node's worker failures since the last attempt, the cause first (`precedence`): each node's local
    leader takes its node's notes, and the ranks gather them."""
    taken: list[dict] = []
    if local_leader:
        path = notes / FAILURES_FILE
        if path.is_file():
            taken = files.read_json_lines(path, "trainer.restarts")[0]  # a node killed mid-line left half of one
            path.unlink()
    gathered: list[list[dict] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, taken)
    return sorted((failure for found in gathered for failure in found or []), key=precedence)


LOST_PEER = re.compile(r"closed by peer|reset by peer|broken pipe|remote process exited|communicator was aborted", re.I)
"""What a rank says when another rank died under it (gloo, NCCL): a consequence, not the cause."""


def precedence(failure: dict) -> tuple[bool, bool, float]:
    """The cause first: a rank killed by a signal, then one that failed by itself, then the ranks that only
    lost a peer; each in the order the nodes noted them (the nodes notice a death about as fast as its peers'
    errors follow it, so the time alone does not tell)."""
    return failure["exit_code"] >= 0, bool(LOST_PEER.search(failure["cause"])), failure["at"]


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


def record_restart(checkpoints: Path, output: Path, count: int, resumed: int, restarts: int, failed: list[dict]) -> str:
    """Log and record this attempt's restart (the `count`th): its cause (the first of `failed`; the others,
    ranks losing their peers, follow from it), from which checkpoint it resumes and the steps lost."""
    last = reached(checkpoints)
    lost = None if last is None else max(0, last - resumed)
    cause = f"{failed[0]['where']}: {failed[0]['cause']}" if failed else None
    event = {
        "restart": count,
        "of": restarts,
        "cause": cause,
        "resumed_step": resumed,
        "reached_step": last,
        "steps_lost": lost,
        "failures": failed,
    }
    output.mkdir(parents=True, exist_ok=True)
    with (output / RESTARTS_FILE).open("a") as file:
        file.write(json.dumps(event) + "\n")
    lost_text = "unknown" if lost is None else str(lost)
    return (
        f"restart {count} of {restarts}: {cause or 'cause unknown (no node noted a worker failure)'}; resumed from "
        f"step {resumed} (rank 0 had reached step {last if last is not None else '?'}); steps lost: {lost_text}"
    )
