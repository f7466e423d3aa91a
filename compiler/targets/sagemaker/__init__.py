"""The SageMaker target: a CreateTrainingJob request (see `translate`), submitted and followed with boto3.

The platform runs the job (not `attached`): Ctrl-C while following detaches, and `dockyard status` asks
SageMaker later. Clients come from one boto3 session, so `AWS_ENDPOINT_URL` (moto's server in tests) and
the user's profile apply as in AWS's own tools.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from botocore.exceptions import BotoCoreError, ClientError

from compiler.core.capabilities import Capabilities
from compiler.spec import DataSource, Plan, files
from compiler.spec.errors import ConfigError, PlatformError
from compiler.spec.schema import Config
from compiler.targets.base import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, STOPPED, JobState
from compiler.targets.logs import LogLine
from compiler.targets.sagemaker import rules
from compiler.targets.sagemaker.translate import SageMakerRequest, to_request

STATES = {
    "InProgress": RUNNING,
    "Stopping": RUNNING,
    "Completed": COMPLETED,
    "Failed": FAILED,
    "Stopped": STOPPED,
}
"""A training job's status as a run's."""
WAITING = ("Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack", "Downloading")
"""Secondary statuses of an InProgress job whose containers have not started training: pending."""


class SageMakerTarget:
    kind = "sagemaker"
    capabilities = Capabilities(
        host_cpu=False,
        host_folders=False,
        file_systems=(DataSource.fsx, DataSource.efs),
        smddp=True,
        warm_pools=True,
        instance_groups=True,
        managed_prices=True,
    )
    attached = False

    def check(self, plan: Plan) -> list[str]:
        return rules.check(plan)

    def account_defaults(self, config: Config) -> dict[str, object]:
        from compiler.targets.sagemaker import account

        return account.defaults(config, _session(config.target.region))

    def to_request(self, plan: Plan, image: str, *, run_id: str, run_dir: Path) -> SageMakerRequest:
        if not plan.image.push:
            raise ConfigError(
                "image.push",
                "SageMaker pulls the image from a registry",
                "set image.push=true image.registry=<account>.dkr.ecr.<region>.amazonaws.com",
            )
        if plan.target.output_uri is None:
            raise ConfigError("target.output_uri", "is missing", "set target.output_uri=s3://bucket/prefix for the job")
        job_prefix = f"{plan.target.output_uri.rstrip('/')}/{run_id}"
        return to_request(plan, image, run_id=run_id, job_prefix=job_prefix)

    def image_reference(self, plan: Plan, planned: str) -> str:
        """`registry/name:tag`: the push then pins the job to that tag's digest (`registry/name@sha256:...`)."""
        return f"{plan.image.registry}/{planned}"

    def preflight(self, request: SageMakerRequest) -> None:
        from compiler.targets.sagemaker import submit

        submit.preflight(request, _session(request.region))

    def resume_checkpoints(self, run_id: str, run_dir: Path) -> list[str]:
        """The run's own checkpoint prefix, where the first attempt wrote under its output location."""
        target = Plan.from_json(files.read_text(run_dir / "plan.json", "--resume")).target
        output = getattr(target, "output_uri", None)
        if output and not getattr(target, "checkpoint_uri", None):
            return [f"target.checkpoint_uri={output.rstrip('/')}/{run_id}/checkpoints"]
        return []

    def submit(self, request: SageMakerRequest, plan_json: str, *, out: IO[str]) -> dict:
        from compiler.targets.sagemaker import submit

        name = submit.submit(request, plan_json, _session(request.region))
        print(f"submitted {name}", file=out)
        return {"job_name": name, "region": request.region}

    def follow(self, request: SageMakerRequest, handle: dict, *, out: IO[str], interrupted) -> JobState | None:
        from compiler.targets.sagemaker import submit

        final = submit.follow(handle["job_name"], _session(handle["region"]), out=out, interrupted=interrupted)
        return None if final is None else self.status(handle)

    def notes(self, request: SageMakerRequest) -> list[str]:
        from compiler.targets.sagemaker import warm_pools

        try:
            pool = warm_pools.matching_pool(request.create_training_job, _session(request.region).client("sagemaker"))
        except (BotoCoreError, ClientError) as error:
            return [f"may start on a warm pool: looking for one failed ({error})"]
        return [] if pool is None else [f"starts on the warm pool of {pool} (same instances, role and VPC)"]

    def release_warm_pool(self, handle: dict) -> None:
        from compiler.targets.sagemaker import warm_pools

        with _asking(handle):
            warm_pools.release(handle["job_name"], _session(handle["region"]).client("sagemaker"))

    def status(self, handle: dict) -> JobState:
        from compiler.targets.sagemaker import submit, warm_pools

        with _asking(handle):
            job = submit.describe(handle["job_name"], _session(handle["region"]))
        secondary = job.get("SecondaryStatus", "")
        status = STATES.get(job["TrainingJobStatus"], CANCELLED)
        if status == RUNNING and secondary in WAITING:
            status = PENDING
        reason = f": {job['FailureReason']}" if job.get("FailureReason") else ""
        return JobState(
            status=status,
            detail=f"{job['TrainingJobStatus']} ({secondary}){reason}",
            metrics=job_metrics(job),
            billing=job_billing(job),
            warm_pool=warm_pools.describe(job, datetime.now(UTC)),
        )

    def logs(self, handle: dict) -> list[LogLine]:
        from compiler.targets.sagemaker import submit

        with _asking(handle):
            return submit.log_lines(_session(handle["region"]).client("logs"), handle["job_name"])

    def stop(self, handle: dict) -> None:
        from compiler.targets.sagemaker import submit

        with _asking(handle):
            submit.stop(handle["job_name"], _session(handle["region"]))


def job_billing(job: dict) -> dict[str, float] | None:
    """Trained and billed seconds, once SageMaker reports them (at the job's end)."""
    if "BillableTimeInSeconds" not in job:
        return None
    return {"training_s": job.get("TrainingTimeInSeconds", 0), "billable_s": job["BillableTimeInSeconds"]}


def job_metrics(job: dict) -> dict[str, float]:
    """A job's final metrics as SageMaker reports them (named as `translate.metric_definitions` names them)."""
    return {m["MetricName"]: m["Value"] for m in job.get("FinalMetricDataList", [])}


@contextmanager
def _asking(handle: dict) -> Iterator[None]:
    """SageMaker's answer about a launched job, or a PlatformError in one line where it cannot be had (no
    endpoint reachable, no credentials, the job unknown to the account)."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise PlatformError(f"SageMaker cannot be asked about job {handle['job_name']}: {error}") from None


def _session(region: str):
    import boto3

    return boto3.Session(region_name=region)


TARGET = SageMakerTarget()
