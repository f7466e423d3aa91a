"""`dockyard status|logs|stop RUN`: follow a run after `launch`, by its id or its folder.

The run record (`run.json`, see `compiler.targets.records`) says which target runs it and the handle that
target gave the job; the target answers from there (`compiler.targets.base.Target`).
"""

import argparse
import sys
from pathlib import Path

from compiler.launch import runs, summary
from compiler.spec.errors import ConfigError
from compiler.targets import records, registry


def find_record(run: str) -> records.RunRecord:
    folder = records.find(run, Path.cwd())
    if folder is None:
        raise ConfigError("run", f"no run '{run}' under {Path.cwd()}", "give the run id or the run folder")
    return records.load(folder)


def status(record: records.RunRecord) -> None:
    record = runs.refresh(record)
    print(f"run       {record.run_id} ({record.target})")
    print(f"folder    {record.run_dir}")
    print(f"image     {record.image}")
    detail = f": {record.detail}" if record.detail else ""
    exit_text = "" if record.exit_status is None else f", exit status {record.exit_status}"
    print(f"status    {record.status}{detail} after {record.attempts} attempt(s){exit_text}")
    if record.warm_pool:
        print(f"warm pool {record.warm_pool}")
    if record.billable_s is not None:
        saving = "" if record.spot_saving is None else f", {record.spot_saving:.0%} saved by spot"
        print(f"billing   trained {record.training_s:.0f} s, billed {record.billable_s:.0f} s{saving}")


def logs(record: records.RunRecord) -> None:
    registry.get(record.target).logs(record.handle, sys.stdout)


def stop(record: records.RunRecord) -> None:
    runs.stop(record)
    print(f"stopped   {record.run_id}")


def release_warm_pool(record: records.RunRecord) -> None:
    target = registry.get(record.target)
    if not target.capabilities.warm_pools:
        raise ConfigError("run", f"target={record.target} keeps no warm pools", "give a SageMaker run")
    target.release_warm_pool(record.handle)
    print(f"released  the warm pool of {record.run_id} (keep-alive set to 0)")


ACTIONS = {"status": status, "logs": logs, "stop": stop, "warm-pool": release_warm_pool}


def sweep_status(sweep_dir: Path) -> None:
    """A sweep's folder: refresh the points still running, rewrite its summary and print it."""
    summary.refresh(sweep_dir)
    print((sweep_dir / summary.SUMMARY_MD).read_text(), end="")


def main(verb: str, args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"dockyard {verb}")
    if verb == "warm-pool":
        parser.add_argument("action", choices=["release"], help="release: set the pool's keep-alive to 0")
    parser.add_argument("run", help="the run id `launch` printed, or the run folder (a sweep's folder for status)")
    if verb == "status":
        parser.add_argument("--plot", action="store_true", help="draw RUN/loss.png from the metrics in its folder")
    parsed = parser.parse_args(args)  # argparse exits 2 with one usage line on a mistake
    run = parsed.run
    if verb == "status" and records.holds_file(Path(run), summary.SUMMARY_CSV):
        return sweep_status(Path(run))
    record = find_record(run)
    ACTIONS[verb](record)
    if getattr(parsed, "plot", False):
        draw_plot(record)


def draw_plot(record: records.RunRecord) -> None:
    """`status RUN --plot`: the run's loss.png, from the metrics its nodes left so far in its folder."""
    path = runs.plot_run(Path(record.run_dir), record.run_id)
    if path is None:
        print(f"plot      none: no metrics in {record.run_dir} yet (a remote target keeps them in its output)")
    else:
        print(f"plot      {path}")
