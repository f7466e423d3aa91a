"""The Slurm target's I/O: sbatch, scontrol/sacct, the job's output file and scancel, run on the submit host
(the user's login node) with the cluster's own client commands.

A job's state comes from `scontrol show job` while the controller remembers it (MinJobAge after it ends),
then from `sacct` where the cluster keeps accounting. Its log is the one output file the script names,
which `srun --label` fills with `N: line` for task N, that is the N-th node of the job's node list.
"""

import re
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from compiler.spec.errors import ConfigError
from compiler.spec.hostlist import expand_hostlist
from compiler.spec.s3 import download_s3
from compiler.targets.base import COMPLETED, FAILED, FINAL_STATUSES, PENDING, RUNNING, STOPPED, JobState
from compiler.targets.host_user import make_run_folders
from compiler.targets.logs import LogLine
from compiler.targets.slurm.translate import SlurmRequest

POLL_S = 1.0

STATUSES = {
    **dict.fromkeys(("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"), PENDING),
    **dict.fromkeys(("CONFIGURING", "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"), RUNNING),
    "COMPLETED": COMPLETED,
    **dict.fromkeys(("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE", "TIMEOUT", "PREEMPTED"), FAILED),
    "CANCELLED": STOPPED,
}
"""Slurm's job states (squeue(1), JOB STATE CODES) in the shared statuses. A job requeued for a retry is
pending again; a cancelled one was stopped by its user (`dockyard stop` or scancel)."""

REFUSALS = {
    "invalid partition": "target.partition",
    "invalid account": "target.account",
    "generic resource": "hardware.instance_type",
}
"""sbatch's messages for a value the cluster does not have (GPUs are a generic resource), and the key to name."""


def _slurm(*command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)


def submit(request: SlurmRequest, plan_json: str, *, out: IO[str]) -> dict:
    """Ask the controller whether it would take the script (`sbatch --test-only`: a partition or GPUs the
    cluster lacks is a ConfigError before anything is written), put the plan and the script into the run
    folder, then `sbatch --parsable` the script."""
    refusal = _slurm("sbatch", "--test-only", stdin=str(request))
    if refusal.returncode != 0:
        message = (refusal.stderr.strip().splitlines() or ["no message"])[0].removeprefix("sbatch: error: ")
        key = next((key for text, key in REFUSALS.items() if text in message.lower()), "target")
        raise ConfigError(key, f"sbatch refused the job: {message}", "see what the cluster has with `sinfo`")
    run_dir = Path(request.run_dir)
    (run_dir / "plan").mkdir(parents=True, exist_ok=True)
    (run_dir / "plan" / "plan.json").write_text(plan_json)
    make_run_folders(request.host_folders)
    for folder, uri in request.downloads.items():
        out.write(f"data      copying {uri} to {folder}\n")
        download_s3(uri, Path(folder))
    script = run_dir / "job.sbatch"
    script.write_text(str(request))
    result = _slurm("sbatch", "--parsable", str(script))
    if result.returncode != 0:
        raise RuntimeError(f"sbatch {script}: {result.stderr.strip()}")
    job_id = result.stdout.strip().split(";")[0]  # `id` or `id;cluster`
    out.write(f"slurm     job {job_id} submitted; output {run_dir / f'slurm-{job_id}.out'}\n")
    return {"job_id": job_id, "output": str(run_dir / f"slurm-{job_id}.out")}


def job_fields(job_id: str) -> dict[str, str] | None:
    """`scontrol show job -o` as a dict, or None once the controller has forgotten the job."""
    result = _slurm("scontrol", "show", "job", "-o", job_id)
    if result.returncode != 0:
        return None
    return dict(re.findall(r"(\S+?)=(\S*)", result.stdout))


def _exit_status(text: str) -> int:
    """Slurm's `code:signal`; a job killed by a signal reads as 128 + signal, as in a shell."""
    code, _, signal = text.partition(":")
    return 128 + int(signal) if signal and int(signal) else int(code or 0)


def status(handle: dict) -> JobState:
    fields = job_fields(handle["job_id"])
    if fields is None:
        return _from_accounting(handle["job_id"])
    state = fields["JobState"]
    reason = fields.get("Reason", "None")
    return JobState(
        status=STATUSES.get(state, RUNNING),
        detail=state if reason == "None" else f"{state}: {reason}",
        exit_status=_exit_status(fields["ExitCode"]) if STATUSES.get(state) not in (PENDING, RUNNING) else None,
        attempts=int(fields.get("Restarts", "0")) + 1,
    )


def _from_accounting(job_id: str) -> JobState:
    """A job the controller no longer holds: its last record in the accounting database, if any."""
    result = _slurm("sacct", "--jobs", job_id, "--allocations", "--noheader", "--parsable2", "--format=State,ExitCode")
    lines = result.stdout.splitlines()
    if result.returncode != 0 or not lines:
        detail = result.stderr.strip() or "no accounting record"
        return JobState(status=FAILED, detail=f"the controller no longer holds job {job_id} ({detail})")
    state, exit_code = lines[-1].split("|")
    state = state.split()[0]  # "CANCELLED by 0"
    return JobState(status=STATUSES.get(state, FAILED), detail=state, exit_status=_exit_status(exit_code))


def node_names(handle: dict) -> list[str]:
    """The job's nodes in task order (task N runs on the N-th node: one task per node, block distribution)."""
    fields = job_fields(handle["job_id"]) or {}
    nodes = fields.get("NodeList", "(null)")
    return [] if nodes in ("", "(null)") else expand_hostlist(nodes)


LABEL = re.compile(r"\s*(\d+): ?(.*)")


def log_line(line: str, nodes: list[str]) -> LogLine:
    """`3: text` from srun --label as a line of the node of task 3; the script's own lines as the job's."""
    match = LABEL.fullmatch(line)
    if match and int(match[1]) < len(nodes):
        return LogLine(nodes[int(match[1])], match[2])
    return LogLine("", line)


def logs(handle: dict) -> list[LogLine]:
    """The job's output file, which every node's task writes in turn: in time order as it is."""
    path = Path(handle["output"])
    if not path.exists():
        return []
    nodes = node_names(handle)
    return [log_line(line, nodes) for line in path.read_text(errors="replace").splitlines()]


def follow(handle: dict, *, out: IO[str], interrupted) -> JobState | None:
    """Print the job's output as it grows (and its pending reason when that changes) until it ends, or None
    when `interrupted` is set (the job goes on: `dockyard logs` and `stop` find it again)."""
    interrupted = interrupted or threading.Event()  # Ctrl-C raises KeyboardInterrupt from its wait instead
    path, offset, pending = Path(handle["output"]), 0, ""
    nodes: list[str] = []
    while True:
        current = status(handle)
        if current.status == PENDING:
            if current.detail != pending:
                out.write(f"slurm     job {handle['job_id']} pending ({current.detail})\n")
            pending, nodes = current.detail, []  # a requeued job may start on other nodes
        else:
            pending, nodes = "", nodes or node_names(handle)
        offset = _print_new_lines(path, offset, nodes, out)
        if current.status in FINAL_STATUSES:
            return current
        if interrupted.wait(POLL_S):
            return None


def _print_new_lines(path: Path, offset: int, nodes: list[str], out: IO[str]) -> int:
    """Complete lines added to `path` since `offset`; returns the new offset."""
    if not path.exists():
        return offset
    with path.open("rb") as file:
        file.seek(offset)
        data = file.read()
    complete = data[: data.rfind(b"\n") + 1]
    for line in complete.decode(errors="replace").splitlines():
        out.write(f"{log_line(line, nodes)}\n")
    out.flush()
    return offset + len(complete)


def stop(handle: dict) -> None:
    """scancel; each node's task removes its container when Slurm signals it (see the script)."""
    result = _slurm("scancel", handle["job_id"])
    if result.returncode != 0:
        raise RuntimeError(f"scancel {shlex.quote(handle['job_id'])}: {result.stderr.strip()}")
    deadline = time.monotonic() + 60
    while status(handle).status in (PENDING, RUNNING) and time.monotonic() < deadline:
        time.sleep(POLL_S / 4)
