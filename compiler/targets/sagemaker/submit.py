"""The I/O half of the SageMaker target: check the role, buckets and quotas (changing nothing, before the
image is built), then upload the plan, create the job and follow it (status changes and CloudWatch log
lines) until it ends or the user detaches.

Clients come from one boto3 session, so `AWS_ENDPOINT_URL` (moto's server in tests) and the user's
profile and credentials apply as everywhere in AWS's tools; nothing here reads them itself.
"""

import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import boto3
from botocore.exceptions import ClientError

from compiler.spec.errors import ConfigError
from compiler.targets.logs import LogLine, merged
from compiler.targets.sagemaker import account, quotas
from compiler.targets.sagemaker.translate import SageMakerRequest

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
STREAM_INSTANCE = re.compile(r"(?P<host>.+)-\d{9,}")
"""An instance's log stream after the job's name: its host, then when it started (epoch seconds)."""
FINAL_STATES = ("Completed", "Failed", "Stopped")


def split_s3_uri(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def preflight(request: SageMakerRequest, session: boto3.Session) -> None:
    """Every refusal SageMaker's account can tell before the job exists (a role, a bucket, a quota), asked
    without creating anything: `launch` calls it before it builds and pushes the image."""
    check_resources(request, session)
    quotas.check(request.create_training_job, session.client("service-quotas"), session.client("sagemaker"))


def check_resources(request: SageMakerRequest, session: boto3.Session) -> None:
    """A missing role or bucket is a user's mistake: say which key, before anything is created. The account's
    default bucket is not asked for: `submit` creates it when missing, as SageMaker's SDK does."""
    job = request.create_training_job
    role_name = job["RoleArn"].rsplit("/", 1)[-1]
    try:
        session.client("iam").get_role(RoleName=role_name)
    except ClientError as error:
        raise ConfigError(
            "target.role_arn",
            f"role {job['RoleArn']} cannot be used: {_message(error)}",
            "create it with SageMaker as a trusted entity, or fix the ARN",
        ) from None
    buckets = {
        "target.output_uri": job["OutputDataConfig"]["S3OutputPath"],
        "target.checkpoint_uri": job["CheckpointConfig"]["S3Uri"],
    }
    for channel in job["InputDataConfig"]:
        if "S3DataSource" in channel["DataSource"] and channel["ChannelName"] != "plan":
            buckets["data.uri"] = channel["DataSource"]["S3DataSource"]["S3Uri"]
    s3 = session.client("s3")
    for key, uri in buckets.items():
        bucket = split_s3_uri(uri)[0]
        if account.is_default_bucket(bucket, request.region, session):
            continue
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as error:
            raise ConfigError(
                key, f"bucket {bucket} cannot be reached: {_message(error)}", "create the bucket or fix the URI"
            ) from None


def upload_folder(folder: Path, uri: str, s3) -> None:
    """Every file under `folder` to the same relative key under the s3:// prefix `uri`, several at a time."""
    bucket, prefix = split_s3_uri(uri)
    files = [path for path in sorted(folder.rglob("*")) if path.is_file()]
    print(f"dockyard: uploading {folder} ({sum(f.stat().st_size for f in files) / 2**20:.1f} MiB) to {uri}")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda f: s3.upload_file(str(f), bucket, prefix + f.relative_to(folder).as_posix()), files))


def submit(request: SageMakerRequest, plan_json: str, session: boto3.Session) -> str:
    """Create the account's default bucket where the job writes to it, upload the plan and create the job
    (`preflight` has checked what it could); returns the job's name."""
    output_bucket = split_s3_uri(request.create_training_job["OutputDataConfig"]["S3OutputPath"])[0]
    account.create_default_bucket(output_bucket, request.region, session)
    for folder, uri in request.uploads.items():
        upload_folder(Path(folder), uri, session.client("s3"))
    bucket, prefix = split_s3_uri(request.plan_uri)
    session.client("s3").put_object(Bucket=bucket, Key=f"{prefix}plan.json", Body=plan_json.encode())
    client = session.client("sagemaker")
    client.create_training_job(**request.create_training_job)
    return request.create_training_job["TrainingJobName"]


def follow(
    job_name: str,
    session: boto3.Session,
    *,
    out: IO[str] = sys.stdout,
    poll_s: float = 15.0,
    interrupted: threading.Event | None = None,
) -> str | None:
    """Print status changes and new log lines until the job ends; returns its final status, or None when
    `interrupted` is set first (the job goes on)."""
    sagemaker, logs = session.client("sagemaker"), session.client("logs")
    interrupted = interrupted or threading.Event()
    seen_status, next_tokens = None, {}
    while True:
        job = sagemaker.describe_training_job(TrainingJobName=job_name)
        status = (job["TrainingJobStatus"], job.get("SecondaryStatus"))
        if status != seen_status:
            print(f"{job_name}: {status[0]} ({status[1]})", file=out)
            seen_status = status
        print_new_log_lines(logs, job_name, next_tokens, out)
        if status[0] in FINAL_STATES:
            if job.get("FailureReason"):
                print(f"{job_name}: {job['FailureReason']}", file=out)
            return status[0]
        if interrupted.wait(poll_s):
            return None


def print_new_log_lines(logs, job_name: str, next_tokens: dict[str, str], out: IO[str]) -> None:
    """One page of each stream's lines after those printed before (`next_tokens`, updated)."""
    for name in _stream_names(logs, job_name):
        kwargs = {"nextToken": next_tokens[name]} if name in next_tokens else {"startFromHead": True}
        page = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=name, **kwargs)
        for event in page["events"]:
            print(f"{stream_host(name)} | {event['message']}", file=out)
        next_tokens[name] = page["nextForwardToken"]


def log_lines(logs, job_name: str) -> list[LogLine]:
    """Every line of every instance's stream, merged by the time CloudWatch stamped it."""
    streams = []
    for name in _stream_names(logs, job_name):
        lines, kwargs = [], {"startFromHead": True}
        while True:  # pages until the forward token stops changing, as CloudWatch documents
            page = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=name, **kwargs)
            lines += [LogLine(stream_host(name), e["message"], e["timestamp"] / 1000) for e in page["events"]]
            if not page["events"] or page["nextForwardToken"] == kwargs.get("nextToken"):
                break
            kwargs = {"nextToken": page["nextForwardToken"]}
        streams.append(lines)
    return merged(streams)


def _stream_names(logs, job_name: str) -> list[str]:
    names: list[str] = []
    try:
        for page in logs.get_paginator("describe_log_streams").paginate(
            logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job_name}/"
        ):
            names += [stream["logStreamName"] for stream in page["logStreams"]]
    except logs.exceptions.ResourceNotFoundException:
        pass  # no instance has started logging yet
    return names


def stream_host(name: str) -> str:
    """`job/algo-1-1700000000` (SageMaker's stream of one instance) as its host, `algo-1`."""
    instance = name.split("/", 1)[-1]
    match = STREAM_INSTANCE.fullmatch(instance)
    return match["host"] if match else instance


def describe(job_name: str, session: boto3.Session) -> dict:
    return session.client("sagemaker").describe_training_job(TrainingJobName=job_name)


def stop(job_name: str, session: boto3.Session) -> None:
    session.client("sagemaker").stop_training_job(TrainingJobName=job_name)


def _message(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Message") or error.response.get("Error", {}).get("Code", "error")
