"""How fast a dry-run sweep goes on dockyard's launcher, against Hydra's basic launcher.

In one process, over the same points (a 4 strategies × N/4 seeds grid of the smoke experiment):
(1) `dockyard launch --dry-run -m hydra/launcher=dockyard ...` end to end through Hydra's multirun, as the
CLI runs it: every point composed, validated, planned, its image reference hashed and its request rendered
(by one forked worker per core, `compiler/sweep/parallel.py`), then written, then the summary; (2) Hydra's
basic launcher running a task that does nothing, so all it pays for is composing each point (and Hydra's
per-job bookkeeping); it is driven directly, so the basic sweeper's second compose of every point is left
out of the baseline.

    python bench/sweep.py [--points 1000]
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from hydra._internal.callbacks import Callbacks
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.types import HydraContext, RunMode
from hydra.version import setbase

from compiler.cli import main as cli
from compiler.cli import tasks
from compiler.config import cache
from compiler.config.compose import CONF_DIR, CONFIG_NAME
from compiler.sweep import parallel
from compiler.targets import records

STRATEGIES = ["ddp", "fsdp", "zero1", "zero2"]


def sweep_arguments(points: int) -> list[str]:
    return [f"parallelism={','.join(STRATEGIES)}", f"trainer.seed=range(0,{points // len(STRATEGIES)})"]


def dockyard_dry_run(arguments: list[str], sweep_dir: Path) -> int:
    """The real CLI path, in-process; returns how many points it wrote."""
    overrides = ["-m", "hydra/launcher=dockyard", "hydra.launcher.dry_run=true", f"hydra.sweep.dir={sweep_dir}"]
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        cli.run_app(tasks.dry_run_task, [*overrides, *arguments])
    points = records.load_all(sweep_dir)
    assert all(record.status == records.DRY_RUN for record in points)
    return len(points)


def basic_launcher(arguments: list[str], sweep_dir: Path) -> int:
    """Hydra's basic launcher over the same points, with a task that does nothing with its config."""
    setbase("1.3")
    hydra = Hydra.create_main_hydra2(task_name="bench", config_search_path=create_config_search_path(str(CONF_DIR)))
    config = hydra.compose_config(
        CONFIG_NAME,
        ["hydra/launcher=basic", f"hydra.sweep.dir={sweep_dir}", "hydra/job_logging=disabled", *arguments],
        run_mode=RunMode.MULTIRUN,
    )
    HydraConfig.instance().set_config(config)
    context = HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(config))
    launcher = Plugins.instance().instantiate_launcher(
        hydra_context=context, task_function=lambda cfg: None, config=config
    )
    parsed = OverridesParser.create().parse_overrides(arguments)
    job_overrides = [list(point) for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        results = launcher.launch(job_overrides, initial_job_idx=0)
    assert all(result.status is JobStatus.COMPLETED for result in results)
    return len(results)


def timed(run, *args) -> tuple[int, float]:
    start = time.perf_counter()
    points = run(*args)
    return points, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    args = parser.parse_args()
    arguments = sweep_arguments(args.points)
    print(f"points                 {args.points}  ({' '.join(arguments)})")
    workers = parallel.workers_for(args.points)
    print(f"workers                {workers} (of {parallel.cores()} cores; load average {os.getloadavg()[0]:.1f})")
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        ours, ours_s = timed(dockyard_dry_run, arguments, Path(scratch, "dockyard"))
        print(f"dockyard dry run       {ours} points in {ours_s:6.1f} s  {ours / ours_s:7.1f} points/s")
        print("                       (compose, validate, plan, image reference, request, point record; summary)")
        sys.stdout.flush()  # the baseline takes minutes
        with cache.disabled():  # Hydra's own composition
            base, base_s = timed(basic_launcher, arguments, Path(scratch, "basic"))
    print(f"basic launcher         {base} points in {base_s:6.1f} s  {base / base_s:7.1f} points/s  (compose only)")
    print(f"ratio                  {base_s / ours_s:.1f}× the baseline's speed")
    if base_s / ours_s < 15 or ours_s > args.points / 200:
        sys.exit("bench: target missed (at least 15× the baseline's speed, 200 points/s: 1,000 in under 5 s)")


if __name__ == "__main__":
    main()
