"""The SageMaker target: golden CreateTrainingJob requests, botocore's checks, and a real HTTP round trip
against moto's server (create, describe, stop; a wrong role or bucket is the user's error)."""

import io
import json
import time

import pytest
from botocore.exceptions import ClientError, ParamValidationError

import compiler.targets.sagemaker as sagemaker_target
from compiler.spec.errors import ConfigError, PlatformError
from compiler.targets.base import STOPPED
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.helpers import plan_for
from tests.sagemaker_fake import FakeSageMaker

ROLE = "arn:aws:iam::123456789012:role/dockyard-training"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/job@sha256:" + "0" * 64
PRESETS = ("gpt2-124m-p4d", "llama3-8b-p5x4", "llama3-70b-p5x16")


def request_for(*overrides: str, run_id: str = "golden-run") -> sagemaker.SageMakerRequest:
    plan = plan_for(*overrides, f"target.role_arn={ROLE}")
    return sagemaker.to_request(plan, IMAGE, run_id=run_id, job_prefix=f"s3://dockyard-jobs/{run_id}")


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_request_matches_golden(preset, golden):
    golden.check(f"sagemaker/{preset}.json", request_for(f"experiment={preset}").to_json())


def test_request_carries_layout_limits_and_plan_channel():
    job = request_for(
        "experiment=llama3-8b-p5x4", "target.spot=true", "target.max_wait_hours=30", "target.max_retries=2"
    ).create_training_job
    assert job["ResourceConfig"] == {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 4, "VolumeSizeInGB": 100}
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 108000}
    assert job["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    channels = {c["ChannelName"]: c for c in job["InputDataConfig"]}
    assert channels["plan"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://dockyard-jobs/golden-run/plan/"
    assert channels["train"]["InputMode"] == "FastFile"
    assert job["Environment"]["DOCKYARD_PLAN"] == "/opt/ml/input/data/plan/plan.json"


def test_file_system_channel_and_vpc():
    job = request_for(
        "experiment=gpt2-124m-p4d",
        "data=fsx",
        "data.file_system_id=fs-0123456789abcdef0",
        "data.path=/fsx/tokens",
        "target.subnets=[subnet-0123456789abcdef0]",
        "target.security_groups=[sg-0123456789abcdef0]",
    ).create_training_job
    [data] = [c for c in job["InputDataConfig"] if c["ChannelName"] == "train"]
    assert data["DataSource"]["FileSystemDataSource"]["FileSystemType"] == "FSxLustre"
    assert job["VpcConfig"] == {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]}


def test_script_hyperparameters_are_json_encoded_strings():
    job = request_for(
        "experiment=gpt2-124m-p4d",
        "trainer=script",
        "trainer.source_dir=src",
        "trainer.script=train.py",
        "+trainer.hyperparameters.epochs=3",
        "+trainer.hyperparameters.name=abc",
    ).create_training_job
    assert job["HyperParameters"] == {"epochs": "3", "name": '"abc"'}


def test_metric_definitions_read_the_trainers_metrics_lines(tmp_path):
    """The regexes SageMaker applies to the job's log find each value in a line the trainer really prints;
    a sweep's summary then reads them back from FinalMetricDataList."""
    import re

    from compiler.targets.sagemaker import job_metrics
    from entrypoint.trainer.metrics import TrackedRun
    from entrypoint.trainer.metrics.jsonl import JsonlSink

    printed = io.StringIO()
    record = {"step": 40, "loss": 2.5e-05, "lr": 3e-4, "grad_norm": 0.75, "tokens_per_s": 91234.5, "mfu": None}
    JsonlSink(TrackedRun(plan_for(), tmp_path, "r"), printed).write(record)
    line = printed.getvalue()
    found = {}
    for definition in sagemaker.metric_definitions():
        match = re.search(definition["Regex"], line)
        if match:
            found[definition["Name"]] = float(match.group(1))
    assert found == {"loss": 2.5e-05, "tokens_per_s": 91234.5, "grad_norm": 0.75}  # mfu is null on CPU
    job = {"FinalMetricDataList": [{"MetricName": name, "Value": value} for name, value in found.items()]}
    assert job_metrics(job) == found


def test_missing_role_is_a_config_error():
    plan = plan_for("experiment=gpt2-124m-p4d")
    with pytest.raises(ConfigError, match="target.role_arn: is missing"):
        sagemaker.to_request(plan, IMAGE, run_id="r", job_prefix="s3://b/r")


def test_botocore_rejects_a_malformed_request():
    with pytest.raises(ConfigError, match="SageMaker would reject the job"):
        sagemaker.check_with_botocore({"TrainingJobName": "x", "ResourceConfig": {"InstanceCount": "two"}})


def test_submit_describe_stop_over_http(aws):
    plan = plan_for("experiment=gpt2-124m-p4d", f"target.role_arn={ROLE}")
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-moto-1", job_prefix="s3://dockyard-jobs/moto-1")
    name = sagemaker_submit.submit(request, plan.to_json(), aws)
    job = sagemaker_submit.describe(name, aws)
    assert job["TrainingJobName"] == "dockyard-moto-1"
    assert job["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge"
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    uploaded = aws.client("s3").get_object(Bucket="dockyard-jobs", Key="moto-1/plan/plan.json")["Body"].read()
    assert json.loads(uploaded)["name"] == "gpt2-124m-p4d"
    printed = io.StringIO()
    assert sagemaker_submit.follow(name, aws, out=printed, poll_s=0) == "Completed"  # moto completes at once
    assert "dockyard-moto-1: Completed" in printed.getvalue()


def test_logs_merge_the_instances_streams_in_cloudwatchs_time_order(aws):
    logs = aws.client("logs")
    logs.create_log_group(logGroupName=sagemaker_submit.LOG_GROUP)
    events = {"algo-1": [(1000, "a1"), (3000, "a3")], "algo-2": [(2000, "b2"), (4000, "b4")]}
    start_ms = (int(time.time()) - 60) * 1000  # CloudWatch refuses events older than 14 days
    for host, lines in events.items():
        stream = f"dockyard-moto-logs/{host}-1700000000"
        logs.create_log_stream(logGroupName=sagemaker_submit.LOG_GROUP, logStreamName=stream)
        logs.put_log_events(
            logGroupName=sagemaker_submit.LOG_GROUP,
            logStreamName=stream,
            logEvents=[{"timestamp": start_ms + ms, "message": text} for ms, text in lines],
        )
    lines = sagemaker_submit.log_lines(logs, "dockyard-moto-logs")
    assert [str(line) for line in lines] == ["algo-1 | a1", "algo-2 | b2", "algo-1 | a3", "algo-2 | b4"]
    assert lines[0].time == start_ms / 1000 + 1
    assert sagemaker_submit.log_lines(logs, "no-such-job") == []


def test_stop_sends_stop_training_job(aws):
    """moto 5.2 has no StopTrainingJob (it answers 500): this checks the call botocore sends over HTTP."""
    sent = []
    aws.events.register("before-call.sagemaker.StopTrainingJob", lambda params, **_: sent.append(params))
    with pytest.raises(ClientError):
        sagemaker_submit.stop("dockyard-moto-1", aws)
    assert sent[0]["headers"]["X-Amz-Target"] == "SageMaker.StopTrainingJob"
    assert json.loads(sent[0]["body"]) == {"TrainingJobName": "dockyard-moto-1"}


def test_stop_stops_a_running_job(monkeypatch):
    """Against `FakeSageMaker`, which keeps StopTrainingJob's contract (checked against botocore's model;
    InProgress, then Stopping, then Stopped): the run reads stopped once SageMaker says so."""
    running = {
        "TrainingJobName": "dockyard-stop-1",
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
    }
    fake = FakeSageMaker(running)
    monkeypatch.setattr(sagemaker_target, "_session", lambda region: fake)
    handle = {"job_name": "dockyard-stop-1", "region": "us-east-1"}
    sagemaker_target.TARGET.stop(handle)
    assert sagemaker_target.TARGET.status(handle).detail == "Stopping (Stopping)"
    assert sagemaker_target.TARGET.status(handle).status == STOPPED
    with pytest.raises(PlatformError, match="job is Stopped"):
        sagemaker_target.TARGET.stop(handle)  # as SageMaker refuses to stop a job that has ended: one line
    with pytest.raises(ParamValidationError):
        fake.stop_training_job(TrainingJobName="dockyard-stop-1", Force=True)  # not in StopTrainingJob's model
    with pytest.raises(ParamValidationError):
        fake.stop_training_job(TrainingJobName="dockyard stop 1")  # outside TrainingJobName's pattern


def test_wrong_role_is_a_config_error_and_creates_nothing(aws):
    plan = plan_for("experiment=gpt2-124m-p4d", "target.role_arn=arn:aws:iam::123456789012:role/missing")
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-moto-2", job_prefix="s3://dockyard-jobs/moto-2")
    with pytest.raises(ConfigError) as caught:
        sagemaker_submit.preflight(request, aws)
    assert caught.value.key == "target.role_arn"
    names = [j["TrainingJobName"] for j in aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]]
    assert "dockyard-moto-2" not in names


def test_missing_data_bucket_is_a_config_error(aws):
    plan = plan_for("experiment=gpt2-124m-p4d", f"target.role_arn={ROLE}", "data.uri=s3://no-such-bucket/x")
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-moto-3", job_prefix="s3://dockyard-jobs/moto-3")
    with pytest.raises(ConfigError) as caught:
        sagemaker_submit.preflight(request, aws)
    assert caught.value.key == "data.uri"


def test_tensorboard_events_go_to_s3_as_the_job_runs():
    job = sagemaker.to_request(
        plan_for("experiment=gpt2-124m-p4d", f"target.role_arn={ROLE}", "trainer.trackers=[tensorboard]"),
        IMAGE,
        run_id="r",
        job_prefix="s3://b/r/",
    ).create_training_job
    assert job["TensorBoardOutputConfig"] == {
        "S3OutputPath": "s3://b/r/tensorboard",
        "LocalPath": "/opt/ml/output/data/tensorboard",
    }
    plain = sagemaker.to_request(
        plan_for("experiment=gpt2-124m-p4d", f"target.role_arn={ROLE}"), IMAGE, run_id="r", job_prefix="s3://b/r/"
    )
    assert "TensorBoardOutputConfig" not in plain.create_training_job
