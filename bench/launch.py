"""Overhead of `dockyard launch` on the local target, against torchrun on the host, in the same run.

Both run the smoke plan (2 nodes × 2 CPU processes, the built-in trainer); the clock stops at the first
training step's metrics line. `dockyard launch` runs with its image already built (one warm-up launch
first), so the difference is what dockyard adds: compose and validate, the no-op build check, two
containers on a Docker network, the entrypoint's discovery and environment. Baseline: two torchrun
processes on the host (`--nnodes=2`, master on 127.0.0.1) starting `entrypoint.trainer.train` with the same plan.

    python bench/launch.py        (needs a Docker engine; prints seconds and the overhead)
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan

OVERRIDES = [
    "experiment=smoke",
    "trainer.steps=5",
    "trainer.log_interval=1",
    "trainer.warmup_steps=1",
    "trainer.checkpoint_interval=0",
]
FIRST_STEP = '"step": 1,'
BIN = Path(sys.executable).parent


def seconds_to_first_step(commands: list[list[str]], env: dict[str, str], cwd: Path) -> float:
    """Start the commands together; seconds until one prints the first step's metrics; then let them end."""
    start = time.perf_counter()
    processes = [
        subprocess.Popen(c, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    elapsed = None
    for line in processes[0].stdout:
        if elapsed is None and FIRST_STEP in line:
            elapsed = time.perf_counter() - start
    for process in processes:
        process.communicate()
        if process.returncode:
            raise SystemExit(f"{commands[processes.index(process)][:3]} failed with {process.returncode}")
    if elapsed is None:
        raise SystemExit("no training step was logged")
    return elapsed


def launch_seconds(folder: Path) -> float:
    command = [str(BIN / "dockyard"), "launch", *OVERRIDES]
    seconds_to_first_step([command], dict(os.environ), folder)  # warm-up: builds the image if needed
    return seconds_to_first_step([command], dict(os.environ), folder)


def torchrun_seconds(folder: Path) -> float:
    plan = checked_plan(compose_config(OVERRIDES))
    plan_file = folder / "plan.json"
    plan_file.write_text(plan.to_json())
    commands = [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=2",
            f"--node-rank={rank}",
            "--master-addr=127.0.0.1",
            "--master-port=29511",
            "-m",
            "entrypoint.trainer",
            f"--plan={plan_file}",
        ]
        for rank in (0, 1)
    ]
    env = {**os.environ, "DOCKYARD_ROOT": str(folder / "ml"), "DOCKYARD_BACKEND": "gloo", "PYTHONUNBUFFERED": "1"}
    return seconds_to_first_step(commands, env, folder)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        baseline = torchrun_seconds(Path(folder))
        launched = launch_seconds(Path(folder))
    print(f"torchrun on the host (baseline): {baseline:.1f} s to the first step")
    print(f"dockyard launch, image built:    {launched:.1f} s to the first step")
    print(f"overhead: {launched - baseline:.1f} s (target < 5 s); ratio {launched / baseline:.2f}x")


if __name__ == "__main__":
    main()
