"""`python -m bench.gpu_evidence [--cpu] [--budget S] [--parts ...] OUT` (`bench/gpu_evidence.sh` installs the
carried wheels first): the parts in order, each in worker processes, within the budget.

The budget is wall-clock seconds from the start. Each part may use its weight's share of what is left when
it starts (so time a part leaves unused goes to the next); a worker still running at its part's deadline is
killed, its job recorded as stopped and the part's remaining jobs skipped, each with a note. A worker that
dies (a CUDA error, a segfault) costs its job only: its last line is the job's error and a new worker goes
on with the next job. Exit status 0 when every job ran and passed, 1 otherwise; the report is written
either way.
"""

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.gpu_evidence import jobs as job_lists
from bench.gpu_evidence.report import PARTS, Evidence
from bench.gpu_evidence.worker import RESULT, STARTED, last_line

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = {"paths": 4, "mfu": 4, "accuracy": 3}
"""Each part's share of the budget left when it starts (on an H100, about 3, 3 and 2 minutes of 8)."""
DEFAULT_BUDGET_S = {"cuda": 480, "cpu": 600}
"""Eight minutes of a lease's fifteen; on CPU only a bound (2 idle cores take about a minute, loaded ones more)."""


def label(part: str, job: dict) -> dict:
    """The row's first columns, which a failed or stopped job has too."""
    if part == "paths":
        return {"path": job["name"], "world": job["world"]}
    if part == "mfu":
        return {"model": job["name"], "compile": job["compile"]}
    config = f"{job['name']} {job['strategy']}×{job['ranks']} mb{job['micro_batch']} {job['checkpointing']}"
    return {"config": config}


def row(part: str, job: dict, result: dict) -> dict:
    if part == "accuracy" and result.get("ok"):
        return {k: v for k, v in result.items() if k != "ok"} | {"seconds": result["seconds"]}
    return label(part, job) | result


WORKER_OPTIONS = {"cwd": REPO, "stdout": subprocess.PIPE, "text": True, "start_new_session": True}
"""A worker reports on its standard output, in a session of its own: stopping it stops its children too
(torchrun and its ranks)."""


class Worker:
    """A worker process and a thread reading its lines, so that waiting for the next one can time out."""

    def __init__(self, part: str, device: str, jobs_file: Path, first: int, log: Path) -> None:
        command = [sys.executable, "-m", "bench.gpu_evidence.worker", part, device, str(jobs_file), str(first)]
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        environment = {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore::FutureWarning"}
        self.log = log.open("a")
        self.process = subprocess.Popen(command, env=environment, stderr=self.log, **WORKER_OPTIONS)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, deadline: float) -> str | None:
        """The next line; None when the worker has ended; raises queue.Empty at the deadline."""
        return self.lines.get(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()


def run_part(part: str, jobs: list[dict], device: str, deadline: float, evidence: Evidence, folder: Path) -> str:
    """The part's jobs, restarting a worker after each crash; the part's status."""
    with tempfile.TemporaryDirectory(prefix="gpu-evidence-") as temporary:
        jobs_file = Path(temporary) / "jobs.json"
        jobs_file.write_text(json.dumps(jobs))
        return run_jobs(part, jobs, device, deadline, evidence, folder, jobs_file)


def run_jobs(
    part: str, jobs: list[dict], device: str, deadline: float, evidence: Evidence, folder: Path, jobs_file: Path
) -> str:
    log = folder / f"gpu_evidence-{part}.log"
    log.write_text("")
    done = 0
    while done < len(jobs):
        worker, current = Worker(part, device, jobs_file, done, log), None
        try:
            while (line := worker.next_line(deadline)) is not None:
                kind, index, *rest = line.split(" ", 2)
                if kind == STARTED:
                    current = int(index)
                elif kind == RESULT:
                    evidence.add_row(part, row(part, jobs[int(index)], json.loads(rest[0])))
                    done = int(index) + 1
        except queue.Empty:
            worker.stop()
            if current is not None and current == done:
                stopped = {"ok": False, "error": "stopped: the part's share of the budget was spent during this job"}
                evidence.add_row(part, label(part, jobs[done]) | stopped)
                done += 1
            skipped = [job["name"] for job in jobs[done:]]
            if skipped:
                evidence.note(part, f"budget spent: skipped {len(skipped)} jobs ({', '.join(skipped)})")
            return "stopped at its share of the budget"
        worker.stop()
        if done == len(jobs):
            break
        error = last_line(log.read_text()) or f"worker exit status {worker.process.returncode}"
        if current is None:
            evidence.note(part, f"the worker did not start: {error}")
            return "failed: the worker did not start"
        if current == done:  # the worker died inside job `done`; otherwise it ended after a job run alone
            evidence.add_row(
                part,
                label(part, jobs[done])
                | {"ok": False, "error": f"worker died (exit status {worker.process.returncode}): {error}"},
            )
            done += 1
    return "done"


def header(device: str, budget: float) -> dict:
    import torch

    cuda = device == "cuda"
    return {
        "mode": device,
        "device": torch.cuda.get_device_name(0) if cuda else "CPU (gloo, tiny shapes)",
        "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "budget_s": budget,
        "compile_backend": "inductor" if cuda else "aot_eager (bench/gpu_evidence/worker.py: compile_without_inductor)",
        "command": " ".join(["bench/gpu_evidence.sh", *sys.argv[1:]]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/gpu_evidence.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for gpu_evidence.md, gpu_evidence.json and the logs")
    parser.add_argument("--cpu", action="store_true", help="tiny shapes on gloo, no GPU needed (the suite's run)")
    parser.add_argument("--budget", type=float, help="seconds in all (default: 480, with --cpu 600)")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    args = parser.parse_args()
    started = time.monotonic()
    import torch

    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA device here: run on a GPU machine, or pass --cpu")
    device = "cpu" if args.cpu else "cuda"
    budget = args.budget or DEFAULT_BUDGET_S[device]
    evidence = Evidence(args.out, header(device, budget))
    all_jobs = job_lists.all_jobs(device, torch.cuda.get_device_name(0) if device == "cuda" else None)
    for index, part in enumerate(args.parts):
        left = budget - (time.monotonic() - started)
        if left <= 0:
            evidence.finish(part, "skipped: the budget was spent before it started", 0)
            continue
        share = left * WEIGHTS[part] / sum(WEIGHTS[p] for p in args.parts[index:])
        part_started = time.monotonic()
        status = run_part(part, all_jobs[part], device, part_started + share, evidence, args.out)
        evidence.finish(part, status, time.monotonic() - part_started)
    passed = all(
        evidence.part(p)["status"] == "done" and all(r.get("ok") is not False for r in evidence.part(p)["rows"])
        for p in args.parts
    )
    print((args.out / "gpu_evidence.md").read_text())
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
