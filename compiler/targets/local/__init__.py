"""The local target: one container per node on this machine's Docker engine (see `translate`).

The job lives in the submitting process (`attached`): `follow` starts the containers, streams their logs,
restarts a failed job up to `target.max_retries` times and removes everything on every exit.
"""

import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from compiler.core.capabilities import Capabilities
from compiler.spec import Plan
from compiler.spec.schema import Config
from compiler.targets.base import COMPLETED, FAILED, RUNNING, STOPPED, JobState, require_shared_checkpoint
from compiler.targets.host_user import invoking_user
from compiler.targets.local import rules
from compiler.targets.logs import LogLine, merged, split_timestamp

if TYPE_CHECKING:  # the request's types only where one is made: `dockyard plan` checks, and makes none
    from compiler.targets.local.translate import LocalRequest

STOPPED_DETAIL = "stopped by `dockyard stop`"


class LocalTarget:
    kind = "local"
    capabilities = Capabilities(host_cpu=True, host_folders=True, instance_groups=True)
    attached = True

    def check(self, plan: Plan) -> list[str]:
        return rules.check(plan)

    def account_defaults(self, config: Config) -> dict[str, object]:
        return {}  # this machine is the account: nothing to look up

    def to_request(self, plan: Plan, image: str, *, run_id: str, run_dir: Path) -> "LocalRequest":
        """Pure but for who asks: training runs as the invoking user, passed to the translator."""
        from compiler.targets.local.translate import to_request

        return to_request(plan, image, run_id=run_id, run_dir=run_dir, runs_as=invoking_user())

    def image_reference(self, plan: Plan, planned: str) -> str:
        return planned

    def preflight(self, request: "LocalRequest") -> None:
        """Nothing to ask: the engine is checked when the containers start."""

    def resume_checkpoints(self, run_id: str, run_dir: Path) -> list[str]:
        return require_shared_checkpoint(run_id, run_dir)

    def submit(self, request: "LocalRequest", plan_json: str, *, out: IO[str]) -> dict:
        from compiler.targets.local import runner  # the Docker SDK only where a job runs

        runner.prepare_host_folders(request, plan_json)
        return {"run_id": request.run_id, "run_dir": request.run_dir, "submitted": time.time()}

    def follow(self, request: "LocalRequest", handle: dict, *, out: IO[str], interrupted) -> JobState:
        from compiler.targets.local import runner

        ending = runner.run(request, out=out, interrupted=interrupted)
        if ending.status == 0:
            return JobState(status=COMPLETED, exit_status=0, attempts=ending.attempts)
        if ending.stopped:
            return JobState(status=STOPPED, attempts=ending.attempts, detail=STOPPED_DETAIL)
        status = STOPPED if interrupted is not None and interrupted.is_set() else FAILED
        detail = "ran past target.max_run_hours" if ending.out_of_time else f"exit status {ending.status}"
        return JobState(status=status, exit_status=ending.status, attempts=ending.attempts, detail=detail)

    def notes(self, request) -> list[str]:
        return []

    def status(self, handle: dict) -> JobState:
        """Asked only of a run whose record is not final: its containers say whether it still runs."""
        from compiler.targets.local import runner

        if runner.running(handle["run_id"]):
            return JobState(status=RUNNING)
        if runner.stop_requested(Path(handle["run_dir"]), handle.get("submitted", 0.0)):
            return JobState(status=STOPPED, detail=STOPPED_DETAIL)
        return JobState(status=FAILED, detail="no container of the run is left and it recorded no end")

    def logs(self, handle: dict) -> list[LogLine]:
        """From the run's `logs/<node>.log`, whose lines the runner stamps with the time they came."""
        streams = []
        for log in sorted((Path(handle["run_dir"]) / "logs").glob("*.log")):
            lines = (split_timestamp(line) for line in log.read_text(errors="replace").splitlines())
            streams.append([LogLine(log.stem, text, time) for time, text in lines])
        return merged(streams)

    def stop(self, handle: dict) -> None:
        from compiler.targets.local import runner

        runner.stop(handle["run_id"], Path(handle["run_dir"]))


TARGET = LocalTarget()
