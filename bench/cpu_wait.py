"""OpenMP's wait policy for CPU training on cores that something else also runs on.

Two one-process trainings of the smoke model (`experiment=smoke hardware.nodes=1 hardware.processes_per_node=1`,
40 steps at sequence length 128) run at once on this machine, each with every core as threads (what a lone rank
gets, `OMP_NUM_THREADS` = cores), as two jobs, two test workers or a job and its neighbour would. Twice: with idle
threads sleeping (`OMP_WAIT_POLICY=PASSIVE`, what dockyard's launcher sets for CPU training) and with libgomp's
default, threads that spin between operations (the baseline: torchrun's environment). Then once alone each way,
which is what a dedicated machine sees. The trainer is started by torchrun directly (`-m entrypoint.trainer`), so
the only difference is the variable. The figure is the trainer's own clock at the last step (`elapsed_s`).

    python bench/cpu_wait.py        (no Docker; prints seconds and the ratios)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan

OVERRIDES = [
    "experiment=smoke",
    "hardware.nodes=1",
    "hardware.processes_per_node=1",
    "model.seq_len=128",
    "trainer.steps=40",
    "trainer.warmup_steps=2",
    "trainer.log_interval=10",
    "trainer.checkpoint_interval=0",
]
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path, policy: str | None) -> subprocess.Popen:
    cores = len(os.sched_getaffinity(0))
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": str(REPO)}
    env |= {"DOCKYARD_ROOT": str(root), "OMP_NUM_THREADS": str(cores)}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", f"--master-port={free_port()}"]
    command += ["-m", "entrypoint.trainer", f"--plan={root / 'plan.json'}"]
    return subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def seconds(roots: list[Path], policy: str | None) -> list[float]:
    """Each run's trainer-measured seconds, the runs started together."""
    runs = [start(root, policy) for root in roots]
    for run in runs:
        output, _ = run.communicate(timeout=1800)
        if run.returncode:
            raise SystemExit(f"training failed:\n{output[-3000:]}")
    lines = [next(root.rglob("metrics.jsonl")).read_text().splitlines() for root in roots]
    for root in roots:
        for folder in ("output", "checkpoints"):
            subprocess.run(["rm", "-rf", str(root / folder)], check=True)
    return [json.loads(rows[-1])["elapsed_s"] for rows in lines]


def main() -> None:
    plan = checked_plan(compose_config(OVERRIDES)).to_json()
    with tempfile.TemporaryDirectory() as scratch:
        roots = [Path(scratch) / name for name in ("a", "b")]
        for root in roots:
            root.mkdir()
            (root / "plan.json").write_text(plan)
        seconds(roots[:1], "PASSIVE")  # warms the page cache
        shared_passive = max(seconds(roots, "PASSIVE"))
        shared_spin = max(seconds(roots, None))
        alone_passive = seconds(roots[:1], "PASSIVE")[0]
        alone_spin = seconds(roots[:1], None)[0]
    print(f"cores on this machine                             {len(os.sched_getaffinity(0))}")
    print(f"two at once, idle threads sleep (dockyard)         {shared_passive:.2f} s")
    print(f"two at once, idle threads spin (baseline)          {shared_spin:.2f} s")
    print(f"speed-up with a neighbour                          {shared_spin / shared_passive:.2f}x")
    print(f"alone, idle threads sleep (dockyard)               {alone_passive:.2f} s")
    print(f"alone, idle threads spin (baseline)                {alone_spin:.2f} s")
    print(f"speed-up alone                                     {alone_spin / alone_passive:.2f}x")


if __name__ == "__main__":
    main()
