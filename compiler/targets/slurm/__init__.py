"""The Slurm target: one sbatch script per run (`translate`), submitted and followed with Slurm's own
commands on the login node (`jobs`), checked by its own rules (`rules`)."""

from pathlib import Path
from typing import IO

from compiler.core.capabilities import Capabilities
from compiler.spec import Plan
from compiler.spec.schema import Config
from compiler.targets.base import JobState, require_shared_checkpoint
from compiler.targets.host_user import invoking_user
from compiler.targets.logs import LogLine
from compiler.targets.slurm import jobs, rules, translate
from compiler.targets.slurm.translate import SlurmRequest


class SlurmTarget:
    kind = "slurm"
    capabilities = Capabilities(host_cpu=True, host_folders=True)
    """CPU partitions exist; a host folder is one on the file system the nodes share."""
    attached = False

    def check(self, plan: Plan) -> list[str]:
        return rules.check(plan)

    def account_defaults(self, config: Config) -> dict[str, object]:
        return {}  # the cluster is the account: nothing to look up

    def to_request(self, plan: Plan, image: str, *, run_id: str, run_dir: Path) -> SlurmRequest:
        """Pure but for who asks: the submitting user, passed to the translator."""
        return translate.to_request(plan, image, run_id=run_id, run_dir=run_dir, runs_as=invoking_user())

    def image_reference(self, plan: Plan, planned: str) -> str:
        return f"{plan.image.registry}/{planned}" if plan.image.push and plan.image.registry else planned

    def preflight(self, request: SlurmRequest) -> None:
        """Nothing to ask before the image exists: sbatch answers at submit."""

    def resume_checkpoints(self, run_id: str, run_dir: Path) -> list[str]:
        return require_shared_checkpoint(run_id, run_dir)

    def submit(self, request: SlurmRequest, plan_json: str, *, out: IO[str]) -> dict:
        return jobs.submit(request, plan_json, out=out)

    def follow(self, request: SlurmRequest, handle: dict, *, out: IO[str], interrupted) -> JobState | None:
        return jobs.follow(handle, out=out, interrupted=interrupted)

    def notes(self, request) -> list[str]:
        return []

    def status(self, handle: dict) -> JobState:
        return jobs.status(handle)

    def logs(self, handle: dict) -> list[LogLine]:
        return jobs.logs(handle)

    def stop(self, handle: dict) -> None:
        jobs.stop(handle)


TARGET = SlurmTarget()
