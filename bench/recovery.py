"""Time from a killed rank to the next training step on the local target (two container nodes × two
processes): an in-job restart (`trainer.restarts=1`) against a full job retry (`target.max_retries=1`, the
baseline: the containers are stopped and started again).

Each run kills one trainer process in the second node after step `--kill-at` and times, from the kill, the
first metrics line written after it (the metrics are logged every step). Goal: in-job under a third of the
retry's time.

On a shared machine the figures vary from run to run with the load: `--repeat N` runs the pair N times,
in-job then retry each time, and prints each pair and the medians; `--keep DIR` keeps the runs' folders
(each node's log, with the time of every line) to see where the time went.

    python bench/recovery.py [--kill-at 8] [--steps 14] [--repeat 3] [--keep DIR]
"""

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import docker

from compiler.images.build import build_image, ensure_base_image
from compiler.launch import runs
from compiler.targets.local import translate as local
from tests.helpers import plan_for
from tests.test_local_target import KILL_A_RANK, wait_for_step

IN_JOB, RETRY = "trainer.restarts=1", "target.max_retries=1"
SHORT = ["experiment=smoke", "trainer.warmup_steps=2", "trainer.log_interval=1", "trainer.checkpoint_interval=5"]


def lines(run_dir: Path) -> int:
    path = runs.metrics_file(run_dir)
    return len(path.read_text().splitlines()) if path else 0


def recovery_seconds(engine, image: str, overrides: list[str], run_id: str, kill_at: int, folder: Path) -> float:
    plan = plan_for(*SHORT, *overrides)
    run_dir = folder / run_id
    request = local.to_request(plan, image, run_id=run_id, run_dir=run_dir)
    log = open(folder / f"{run_id}.out", "w")  # noqa: SIM115 - closed when the job has ended
    job = threading.Thread(
        target=lambda: runs.execute(runs.new_record(plan, request, run_dir, request.image), plan, request, out=log)
    )
    job.start()
    wait_for_step(run_dir, kill_at)
    before = lines(run_dir)
    killed_pid = engine.containers.get(f"dockyard-{run_id}-algo-2").exec_run(["python3", "-c", KILL_A_RANK]).output
    killed = time.monotonic()
    if not killed_pid.strip():
        raise SystemExit(f"{run_id}: no trainer process was found to kill in algo-2")
    while lines(run_dir) == before:
        time.sleep(0.05)
    seconds = time.monotonic() - killed
    job.join()
    log.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kill-at", type=int, default=8)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--repeat", type=int, default=1, help="run both this many times, one after the other")
    parser.add_argument("--keep", type=Path, help="a new folder to keep the runs (their nodes' logs) in")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True)
    engine = docker.from_env()
    plan = plan_for(*SHORT)
    ensure_base_image(engine, plan.image, sys.stdout)
    image = build_image(plan, engine, cwd=Path.cwd()).reference
    steps, kill_at = f"trainer.steps={args.steps}", args.kill_at
    pairs = []
    for repeat in range(args.repeat):
        with tempfile.TemporaryDirectory() as scratch:
            folder = args.keep or Path(scratch)
            in_job = recovery_seconds(engine, image, [steps, IN_JOB], f"bench-recovery-injob{repeat}", kill_at, folder)
            retry = recovery_seconds(engine, image, [steps, RETRY], f"bench-recovery-retry{repeat}", kill_at, folder)
        pairs.append((in_job, retry))
        print(f"run {repeat + 1}: in-job {in_job:.1f} s, retry {retry:.1f} s, ratio {in_job / retry:.2f}", flush=True)
    in_job, retry = (statistics.median(figures) for figures in zip(*pairs, strict=True))
    middle = "" if args.repeat == 1 else f" (the median of {args.repeat} runs)"
    print(f"in-job restart  {in_job:.1f} s from the kill to the next step (trainer.restarts=1){middle}")
    print(f"job retry       {retry:.1f} s (target.max_retries=1): the baseline{middle}")
    print(f"ratio           in-job / retry = {in_job / retry:.2f} (goal: under 0.33)")


if __name__ == "__main__":
    main()
