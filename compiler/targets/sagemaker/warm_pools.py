"""SageMaker warm pools: a job with `target.keep_alive_seconds` keeps its instances for that long after it
ends, and the next job with the same instance type and count, role, VPC and volume starts on them in
seconds instead of minutes (SageMaker's matching rules). Billed while retained; released early by setting
the keep-alive to 0 (UpdateTrainingJob).
"""

from datetime import datetime

MATCHED = ("InstanceType", "InstanceCount", "InstanceGroups", "VolumeSizeInGB", "VolumeKmsKeyId")


def describe(job: dict, now: datetime) -> str:
    """The pool's state in one line ("" for a job that keeps none)."""
    pool = job.get("WarmPoolStatus")
    if not pool:
        return ""
    words = [pool["Status"]]
    keep_alive = job["ResourceConfig"].get("KeepAlivePeriodInSeconds", 0)
    if pool["Status"] == "Available" and job.get("TrainingEndTime"):
        left = keep_alive - (now - job["TrainingEndTime"]).total_seconds()
        words.append(f"{max(0, left):.0f} s of {keep_alive} s left")
    if pool.get("ReusedByJob"):
        words.append(f"reused by {pool['ReusedByJob']}")
    if pool.get("ResourceRetainedBillableTimeInSeconds") is not None:
        words.append(f"{pool['ResourceRetainedBillableTimeInSeconds']} s billed while retained")
    return ", ".join(words)


def matching_pool(create_job: dict, client) -> str | None:
    """The name of a finished job whose Available pool a job created with `create_job` would start on."""
    if not create_job["ResourceConfig"].get("KeepAlivePeriodInSeconds"):
        return None  # only a job that asks for a pool may reuse one
    for page in client.get_paginator("list_training_jobs").paginate(WarmPoolStatusEquals="Available"):
        for summary in page["TrainingJobSummaries"]:
            job = client.describe_training_job(TrainingJobName=summary["TrainingJobName"])
            if _same_cluster(job, create_job):
                return job["TrainingJobName"]
    return None


def release(job_name: str, client) -> None:
    client.update_training_job(TrainingJobName=job_name, ResourceConfig={"KeepAlivePeriodInSeconds": 0})


def _same_cluster(job: dict, create_job: dict) -> bool:
    ours, theirs = create_job["ResourceConfig"], job["ResourceConfig"]
    return (
        all(ours.get(key) == theirs.get(key) for key in MATCHED)
        and job.get("RoleArn") == create_job["RoleArn"]
        and job.get("VpcConfig") == create_job.get("VpcConfig")
    )
