"""The account's SageMaker quotas, read from the Service Quotas API before CreateTrainingJob: a job the
account cannot start is refused with the quota's name and the command that raises it, instead of failing
with ResourceLimitExceeded after the image is pushed. New accounts have 0 of most GPU types.

The instance quotas count every training job of the account in the region, so the instances of its jobs
in progress count against them too. Without permission to read quotas the check is a warning: the job is
submitted and SageMaker decides; so is a quota the account does not list by the name looked for (a name
AWS changed, an instance type it has no quota for), which is then not checked.
"""

import sys
from collections.abc import Iterator
from typing import IO

from botocore.exceptions import BotoCoreError, ClientError

from compiler.spec.errors import ConfigError

SERVICE_CODE = "sagemaker"
ALL_JOBS = "Number of instances across all training jobs"
PER_JOB = "Maximum number of instances per training job"
LONGEST_RUN = "Longest run time for a training job"


def check(job: dict, quotas_client, sagemaker_client, out: IO[str] | None = None) -> None:
    """Raise a ConfigError for the first quota `job` (CreateTrainingJob's parameters) would exceed."""
    try:
        limits = {q["QuotaName"]: q for q in _quotas(quotas_client)}
        running = list(_jobs_in_progress(sagemaker_client))
    except (BotoCoreError, ClientError) as error:
        print(
            f"dockyard: warning: the account's SageMaker quotas cannot be read ({error}); submitting",
            file=out or sys.stderr,
        )
        return
    for quota_name, key, needed, in_use in _needs(job, running):
        quota = limits.get(quota_name)
        if quota is None:
            print(
                f"dockyard: warning: the account lists no SageMaker quota '{quota_name}' ({key}); not checked",
                file=out or sys.stderr,
            )
        elif needed + in_use > quota["Value"]:
            using = f" ({in_use:g} in use by jobs in progress)" if in_use else ""
            raise ConfigError(
                key,
                f"needs {needed:g} against the account's quota '{quota_name}' of {quota['Value']:g}{using}",
                "raise it: aws service-quotas request-service-quota-increase --service-code sagemaker "
                f"--quota-code {quota['QuotaCode']} --desired-value {needed + in_use:g}",
            )


def _needs(job: dict, running: list[dict]) -> Iterator[tuple[str, str, float, float]]:
    """(quota, config key, what this job needs, what jobs in progress hold) for each quota the job meets."""
    resources = job["ResourceConfig"]
    spot = job.get("EnableManagedSpotTraining", False)
    held = [(t, n) for j in running for t, n in instances(j["ResourceConfig"])]
    held_same_kind = [
        (t, n)
        for j in running
        if j.get("EnableManagedSpotTraining", False) == spot
        for t, n in instances(j["ResourceConfig"])
    ]
    counts: dict[str, int] = {}
    for instance_type, count in instances(resources):
        counts[instance_type] = counts.get(instance_type, 0) + count
    for instance_type, count in counts.items():
        in_use = sum(n for t, n in held_same_kind if t == instance_type)
        yield f"{instance_type} for {'spot ' if spot else ''}training job usage", "hardware.nodes", count, in_use
        if resources.get("KeepAlivePeriodInSeconds"):
            yield f"{instance_type} for training warm pool usage", "target.keep_alive_seconds", count, 0
    total = sum(counts.values())
    yield ALL_JOBS, "hardware.nodes", total, sum(n for _, n in held)
    yield PER_JOB, "hardware.nodes", total, 0
    yield LONGEST_RUN, "target.max_run_hours", job["StoppingCondition"]["MaxRuntimeInSeconds"], 0


def instances(resources: dict) -> list[tuple[str, int]]:
    """(instance type, count) of a ResourceConfig: one type, or each group of a heterogeneous cluster."""
    groups = resources.get("InstanceGroups") or [resources]
    return [(group["InstanceType"], group["InstanceCount"]) for group in groups]


def _quotas(client) -> Iterator[dict]:
    for page in client.get_paginator("list_service_quotas").paginate(ServiceCode=SERVICE_CODE):
        yield from page["Quotas"]


def _jobs_in_progress(client) -> Iterator[dict]:
    for page in client.get_paginator("list_training_jobs").paginate(StatusEquals="InProgress"):
        for summary in page["TrainingJobSummaries"]:
            yield client.describe_training_job(TrainingJobName=summary["TrainingJobName"])
