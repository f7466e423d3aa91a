"""How fast the `dockyard` command answers, against a bare `import hydra, omegaconf` in the same run.

Each command is a fresh process, as a user starts it: `dockyard plan`, `dockyard launch --dry-run` for
every target, and `dockyard status` of a run folder. Baseline: `python -c "import hydra, omegaconf"`,
the least any Hydra app pays before it composes. The commands and the baseline are timed in turns (a
round runs each once), so a busy machine slows them alike; the figures are medians over the rounds.

The commands share one `$DOCKYARD_HOME`, so they find the bases earlier commands composed on disk
(`compiler/config/stored.py`), as a user's second command does; `plan` is also timed cold, with an empty
`$DOCKYARD_HOME` each time, as a user's very first command (or the first after editing a config file)
runs. Python writes its bytecode caches, as it does by default (a `PYTHONDONTWRITEBYTECODE` in this
environment is dropped for the children, or dockyard's own modules would compile from source each time).

    python bench/cli.py [--rounds 7]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler.core.home import VARIABLE

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
P5 = ["experiment=llama3-8b-p5x4"]
ECR = ["image.push=true", "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com"]
COMMANDS = {
    "plan experiment=smoke": ["plan", "experiment=smoke"],
    "launch --dry-run (local)": ["launch", "--dry-run", "experiment=smoke"],
    "launch --dry-run (sagemaker, 4 × p5)": [
        "launch",
        "--dry-run",
        *P5,
        "target=sagemaker",
        *ECR,
        "target.output_uri=s3://bucket/runs",
        "target.role_arn=arn:aws:iam::123456789012:role/dockyard",
    ],
    "launch --dry-run (kubernetes, 4 × p5)": ["launch", "--dry-run", *P5, "target=kubernetes"],
    "launch --dry-run (slurm, 4 × p5)": ["launch", "--dry-run", *P5, "target=slurm"],
    "status RUN_FOLDER": ["status", "sweep/0"],
}
BASELINE = [sys.executable, "-c", "import hydra, omegaconf"]
COLD = "plan experiment=smoke (cold: empty cache)"


def wall(command: list[str], cwd: str, home: str) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, VARIABLE: home})
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(command)} failed:\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    times: dict[str, list[float]] = {name: [] for name in ["baseline", COLD, *COMMANDS]}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.pop("AWS_PROFILE", None)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        home = os.path.join(scratch, "home")
        # a run folder for `status`: a two-point dry-run sweep writes one record per point
        wall([DOCKYARD, "launch", "--dry-run", "-m", "trainer.seed=1,2", "hydra.sweep.dir=sweep"], scratch, home)
        for index in range(rounds):
            times["baseline"].append(wall(BASELINE, scratch, home))
            times[COLD].append(wall([DOCKYARD, *COMMANDS["plan experiment=smoke"]], scratch, f"{home}-{index}"))
            for name, arguments in COMMANDS.items():
                times[name].append(wall([DOCKYARD, *arguments], scratch, home))
    baseline = statistics.median(times.pop("baseline"))
    label = 'python -c "import hydra, omegaconf"'
    print(f"{label:46} {baseline:6.3f} s  (baseline, median of {rounds})")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"dockyard {name:37} {median:6.3f} s  {median / baseline:4.1f}× the baseline")


if __name__ == "__main__":
    main()
