"""`dockyard launch`, after the build: the run id, the target's translator, and submitting.

`--dry-run` (see `compiler.tasks`) prints what `translate` returns and touches nothing: its image
reference is the content-hash tag the build would produce.
"""

import re
from datetime import datetime
from pathlib import Path

from compiler.errors import ConfigError, UnsupportedError
from compiler.plan import Plan
from compiler.schema import TargetKind
from compiler.targets import local, records, sagemaker


def run_id_for(plan: Plan, now: datetime) -> str:
    """`<name>-<UTC time>`: a valid container, network and SageMaker job name (≤ 63 characters)."""
    name = re.sub(r"[^a-zA-Z0-9]+", "-", plan.name).strip("-")[:40] or "run"
    return f"{name}-{now:%Y%m%d-%H%M%S}"


def submit(plan: Plan, request, run_dir: Path) -> int:
    """Run the request on its target; returns the job's exit status (0 when it completed)."""
    if plan.target.kind is TargetKind.local:
        from compiler.targets.local_runner import submit as run_locally  # the Docker SDK only here

        status = run_locally(request, plan.to_json())
        print_results(run_dir, request.run_id, status)
        return status
    return launch_on_sagemaker(plan, request, run_dir)


def translate(plan: Plan, image: str, run_id: str, run_dir: Path):
    kind = plan.target.kind
    if kind is TargetKind.local:
        return local.to_request(plan, image, run_id=run_id, run_dir=run_dir)
    if kind is TargetKind.sagemaker:
        if not plan.image.push:
            raise ConfigError(
                "image.push",
                "SageMaker pulls the image from a registry",
                "set image.push=true image.registry=<account>.dkr.ecr.<region>.amazonaws.com",
            )
        return sagemaker.to_request(plan, image, run_id=run_id, job_prefix=job_prefix(plan, run_id))
    raise UnsupportedError("target", f"launching on {kind.value} is not supported yet", "use target=local or sagemaker")


def job_prefix(plan: Plan, run_id: str) -> str:
    if plan.target.output_uri is None:
        raise ConfigError("target.output_uri", "is missing", "set target.output_uri=s3://bucket/prefix for the job")
    return f"{plan.target.output_uri.rstrip('/')}/{run_id}"


def launch_on_sagemaker(plan: Plan, request: sagemaker.SageMakerRequest, run_dir: Path) -> int:
    import boto3

    from compiler.targets import sagemaker_submit

    session = boto3.Session(region_name=request.region)
    name = sagemaker_submit.submit(request, plan.to_json(), session)
    record = records.start(
        run_dir, name, "sagemaker", request.create_training_job["AlgorithmSpecification"]["TrainingImage"]
    )
    print(f"submitted {name}; following it (Ctrl-C detaches, the job goes on: dockyard status {name})")
    try:
        status = sagemaker_submit.follow(name, session)
    except KeyboardInterrupt:
        print(f"detached from {name}")
        return 0
    records.update(record, status="completed" if status == "Completed" else "failed")
    return 0 if status == "Completed" else 1


def print_results(run_dir: Path, run_id: str, status: int) -> None:
    outcome = "completed" if status == 0 else f"failed (exit status {status})"
    print(f"run       {run_id} {outcome}")
    print(f"results   {run_dir}")
    for label, relative in (
        ("metrics", "nodes/algo-1/output/data/metrics.jsonl"),
        ("logs", "logs/"),
        ("checkpoints", "checkpoints/"),
        ("model", "model/"),
    ):
        if (run_dir / relative).exists():
            print(f"  {label:<11} {run_dir / relative}")
