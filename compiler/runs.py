"""`dockyard status|logs|stop RUN`: follow a run after `launch`, by its id or its folder.

The run record (`run.json`, see `compiler.targets.records`) says which target ran it; local runs are
answered from the run folder and the Docker engine, SageMaker runs from the SageMaker API.
"""

import argparse
import sys
from pathlib import Path

from compiler.errors import ConfigError
from compiler.targets import records

SWEEP_SUMMARY = "summary.csv"
"""What marks a sweep's folder (`compiler.sweep_summary.SUMMARY_CSV`, not imported: it brings Hydra in)."""


def find_record(run: str) -> records.RunRecord:
    folder = records.find(run, Path.cwd())
    if folder is None:
        raise ConfigError("run", f"no run '{run}' under {Path.cwd()}", "give the run id or the run folder")
    return records.load(folder)


def status(record: records.RunRecord) -> None:
    print(f"run       {record.run_id} ({record.target})")
    print(f"folder    {record.run_dir}")
    print(f"image     {record.image}")
    if record.target == "sagemaker":
        import boto3

        from compiler.targets import sagemaker_submit

        job = sagemaker_submit.describe(record.run_id, boto3.Session())
        print(f"status    {job['TrainingJobStatus']} ({job.get('SecondaryStatus')})")
        return
    exit_text = "" if record.exit_status is None else f", exit status {record.exit_status}"
    print(f"status    {record.status} after {record.attempts} attempt(s){exit_text}")


def logs(record: records.RunRecord) -> None:
    if record.target == "sagemaker":
        import boto3

        from compiler.targets import sagemaker_submit

        sagemaker_submit.print_new_log_lines(boto3.Session().client("logs"), record.run_id, {}, sys.stdout)
        return
    for log in sorted((Path(record.run_dir) / "logs").glob("*.log")):
        for line in log.read_text().splitlines():
            print(f"{log.stem} | {line}")


def stop(record: records.RunRecord) -> None:
    if record.target == "sagemaker":
        import boto3

        from compiler.targets import sagemaker_submit

        sagemaker_submit.stop(record.run_id, boto3.Session())
    else:
        from compiler.targets.local_runner import kill

        kill(record.run_id)
    records.update(record, status="stopped")
    print(f"stopped   {record.run_id}")


ACTIONS = {"status": status, "logs": logs, "stop": stop}


def sweep_status(sweep_dir: Path) -> None:
    """A sweep's folder: refresh the points still running, rewrite its summary and print it."""
    from compiler import sweep, sweep_summary

    sweep.refresh(sweep_dir)
    print((sweep_dir / sweep_summary.SUMMARY_MD).read_text(), end="")


def main(verb: str, args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"dockyard {verb}")
    parser.add_argument("run", help="the run id `launch` printed, or the run folder (a sweep's folder for status)")
    run = parser.parse_args(args).run
    if verb == "status" and (Path(run) / SWEEP_SUMMARY).exists():
        return sweep_status(Path(run))
    ACTIONS[verb](find_record(run))
