"""Why a node's training failed, in words: read from the log torchrun passes through (a worker's exception,
C++'s abort, the signal that ended a rank), noted for the restarted trainer, and given to the platform as the
container's termination message."""

import json
import re
import signal
import time
from pathlib import Path

from compiler.spec.contract import TERMINATION_LOG
from entrypoint.launcher.cluster import Node, Paths

WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
"""What torchrun's agent logs when one of its workers has failed, before it restarts them or gives up."""


FAILURES_FILE = "failures.jsonl"
"""In a node's restart notes (`Paths.restart_notes`): one JSON object per worker failure of that node."""


def worker_failure(node: Node, failed: re.Match, tail: list[str]) -> dict:
    """A worker failure as the node whose worker died sees it: where, the exit code (negative: the signal)
    and the cause in words."""
    code, local_rank = int(failed[1]), int(failed[2])
    cause = f"killed by {signal.Signals(-code).name}" if code < 0 else failure_reason(code, tail[:-1])
    where = f"local rank {local_rank} on node {node.node_rank} ({node.current_host})"
    return {"where": where, "host": node.current_host, "local_rank": local_rank, "exit_code": code, "cause": cause}


def note_failure(paths: Paths, node: Node, failure: dict) -> None:
    """Note the failure where the restarted trainer reads it, if the trainer made the folder (it does when
    the job starts; a failure before that goes without a note)."""
    folder = paths.restart_notes(node.current_host)
    if folder.is_dir():
        with (folder / FAILURES_FILE).open("a") as notes:
            notes.write(json.dumps({**failure, "at": time.time()}) + "\n")


FAILURE_PATTERNS = (
    re.compile(r"\b(\w+(Error|Exception)|Timed out|timed out)\b.*"),
    re.compile(r"\bterminate called\b.*"),
    re.compile(r"\bSignal \d+ \(\w+\) received\b.*"),
)
"""What a failed rank leaves in the log, most telling first: an exception (a collective's timeout is one),
C++'s abort, then the signal that killed a rank (torchrun also ends the healthy ranks of a node with SIGTERM)."""
HINTS = {
    "terminate called without an active exception": (
        "a rank aborted in C++; one that had done its work met torch's exit race on gloo: end the script "
        "as `dockyard init`'s train.py does, os._exit(0) once the process group is destroyed"
    ),
}
"""What a reason means, where the log line alone leaves a user guessing."""
TORCHRUN_EXCEPTIONS = ("ChildFailedError", "SignalException")
"""torchrun's own, left out of the reason: it raises them once a worker has failed or it was signalled itself,
and the worker's own line says more."""


def failure_reason(status: int, tail: list[str]) -> str:
    """The last line of the log matching the first pattern that matches at all, else the exit status."""
    for pattern in FAILURE_PATTERNS:
        for line in reversed(tail):
            if not any(name in line for name in TORCHRUN_EXCEPTIONS) and (match := pattern.search(line)):
                reason = match[0].strip()
                return f"{reason}: {HINTS[reason]}" if reason in HINTS else reason
    return f"torchrun exited with status {status}"


def termination_message(reason: str, path: Path = Path(TERMINATION_LOG)) -> None:
    """The reason as the container's termination message, where Kubernetes made the file for one."""
    if path.is_file():
        path.write_text(reason + "\n")


STOP_EXCEPTIONS = ("SignalException", "JobStoppedError")
"""What torchrun's agent (signalled itself) and each rank (which saved its checkpoint) raise when a job is stopped."""
RANK_PREFIX = re.compile(r"\[(?:default)?rank\d+\]: ")
"""The prefix torchrun's worker error handler puts before each line of a rank's traceback."""
CONTINUED = ("Traceback (most recent call last):", "During handling of the above exception", "The above exception")


class StopTracebacks:
    """A stopped job's log ends with dockyard's own lines: once the job is stopping, each traceback (the agent's
    and every rank's, told apart by their prefix, which may interleave) is held back until its last line, and
    dropped when that line is a stop's exception; any other traceback is passed on whole."""

    def __init__(self) -> None:
        self.held: dict[str, list[str]] = {}

    def passed(self, line: str, stopping: bool) -> list[str]:
        """The lines to print now, given the next `line` of torchrun's output."""
        match = RANK_PREFIX.match(line)
        prefix = match[0] if match else ""
        rest = line[len(prefix) :]
        held = self.held.get(prefix)
        if held is None:
            if stopping and rest.startswith(CONTINUED[0]):
                self.held[prefix] = [line]
                return []
            return [line]
        held.append(line)
        if not rest.strip() or rest[0].isspace() or rest.startswith(CONTINUED):
            return []
        del self.held[prefix]
        return [] if any(name in rest for name in STOP_EXCEPTIONS) else held

    def left(self) -> list[str]:
        """What is still held when the output ends: a traceback cut short, passed on as it is."""
        lines = [line for held in self.held.values() for line in held]
        self.held.clear()
        return lines
