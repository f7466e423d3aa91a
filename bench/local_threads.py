"""Threads of CPU training when the local target's container nodes share this machine.

Two single-process nodes (`experiment=smoke hardware.processes_per_node=1`, the image already built) train 30
steps, twice: as dockyard starts them, each rank taking its share of the cores (`DOCKYARD_NODES_PER_HOST`,
`OMP_NUM_THREADS` = cores ÷ 2), and with every rank taking every core, what torchrun gives a lone process per
node (the baseline, `++target.environment.OMP_NUM_THREADS=<cores>`). The figure is the trainer's own clock at
the last step (`elapsed_s` of its metrics line), so container start-up is not in it.

    python bench/local_threads.py        (needs a Docker engine; prints seconds and the ratio)
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OVERRIDES = [
    "experiment=smoke",
    "hardware.processes_per_node=1",
    "trainer.steps=30",
    "trainer.warmup_steps=2",
    "trainer.log_interval=10",
    "trainer.checkpoint_interval=0",
]
DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def training_seconds(folder: Path, *overrides: str) -> float:
    """The trainer's elapsed seconds at its last step, for one local launch of the smoke plan."""
    command = [DOCKYARD, "launch", *OVERRIDES, *overrides, f"hydra.run.dir={folder}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"launch failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    lines = (folder / "nodes/algo-1/output/data/metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])["elapsed_s"]


def main() -> None:
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        training_seconds(root / "warm-up")  # builds the image if needed
        shared = training_seconds(root / "shared")
        every_core = training_seconds(root / "every-core", f"++target.environment.OMP_NUM_THREADS={cores}")
    print(f"cores on this machine                    {cores}")
    print(f"30 steps, each rank its share (dockyard)  {shared:.2f} s")
    print(f"30 steps, each rank every core (torchrun) {every_core:.2f} s  (baseline)")
    print(f"speed-up                                  {every_core / shared:.2f}x")


if __name__ == "__main__":
    main()
