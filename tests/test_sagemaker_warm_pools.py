"""Warm pools. moto's server keeps KeepAlivePeriodInSeconds but has no WarmPoolStatus, no
WarmPoolStatusEquals filter and no UpdateTrainingJob, so SageMaker's client is `FakeSageMaker` here: the
three calls warm pools make (list, describe, update), each checked against botocore's model, answering as
DescribeTrainingJob documents."""

import contextlib
import io
from datetime import UTC, datetime, timedelta

import pytest

import compiler.targets.sagemaker as sagemaker_target
from compiler.cli import runs as cli_runs
from compiler.cli.main import main
from compiler.targets import records
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from compiler.targets.sagemaker import warm_pools
from tests.helpers import plan_for
from tests.sagemaker_fake import FakeSageMaker

ROLE = "arn:aws:iam::123456789012:role/dockyard-training"
EXPLICIT = [  # nothing left for the caller's account to default
    f"target.role_arn={ROLE}",
    "image.push=true",
    "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
    "target.output_uri=s3://dockyard-jobs/runs",
]
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def finished(name: str, instance_type: str = "ml.p4d.24xlarge", status: str = "Available", **pool) -> dict:
    return {
        "TrainingJobName": name,
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed",
        "RoleArn": ROLE,
        "TrainingEndTime": NOW - timedelta(seconds=600),
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 100,
                           "KeepAlivePeriodInSeconds": 1800},
        "WarmPoolStatus": {"Status": status, **pool},
    }  # fmt: skip


def request_for(*overrides: str) -> dict:
    plan = plan_for("experiment=gpt2-124m-p4d", f"target.role_arn={ROLE}", *overrides)
    return sagemaker.to_request(plan, "img", run_id="next", job_prefix="s3://dockyard-jobs/next").create_training_job


def test_the_pool_says_its_state_and_time_left():
    assert warm_pools.describe(finished("a", ResourceRetainedBillableTimeInSeconds=600), NOW) == (
        "Available, 1200 s of 1800 s left, 600 s billed while retained"
    )
    assert warm_pools.describe(finished("a", status="Reused", ReusedByJob="b"), NOW) == "Reused, reused by b"
    assert warm_pools.describe({"ResourceConfig": {}}, NOW) == ""


def test_a_job_with_the_same_cluster_finds_the_available_pool():
    client = FakeSageMaker(finished("other-type", "ml.p5.48xlarge"), finished("in-use", status="InUse"),
                           finished("match"))  # fmt: skip
    assert warm_pools.matching_pool(request_for("target.keep_alive_seconds=1800"), client) == "match"
    assert warm_pools.matching_pool(request_for("target.keep_alive_seconds=1800", "hardware.nodes=5"), client) is None
    assert warm_pools.matching_pool(request_for(), client) is None  # a job without keep-alive reuses none


def test_the_dry_run_says_it_would_reuse_a_pool(monkeypatch, tmp_path):
    monkeypatch.setattr(sagemaker_target, "_session", lambda region: FakeSageMaker(finished("match")))
    err = io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        main(["launch", "--dry-run", "experiment=gpt2-124m-p4d", *EXPLICIT, "target.keep_alive_seconds=1800"])
    assert "starts on the warm pool of match (same instances, role and VPC)" in err.getvalue()


def sagemaker_record(tmp_path, **fields) -> records.RunRecord:
    handle = {"job_name": "done", "region": "us-east-1"}
    return records.save(
        records.RunRecord(run_dir=str(tmp_path), run_id="done", target="sagemaker", handle=handle, **fields)
    )


def test_status_shows_the_pool_of_a_finished_job(monkeypatch, tmp_path):
    job = finished("done", ResourceRetainedBillableTimeInSeconds=0) | {"TrainingEndTime": datetime.now(UTC)}
    monkeypatch.setattr(sagemaker_submit, "describe", lambda name, session: job)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli_runs.status(sagemaker_record(tmp_path, status="completed"))
    assert "warm pool Available, 1800 s of 1800 s left" in printed.getvalue() or "1799 s of 1800" in printed.getvalue()


def test_release_sets_keep_alive_to_zero(monkeypatch, tmp_path):
    client = FakeSageMaker(finished("done"))
    monkeypatch.setattr(sagemaker_target, "_session", lambda region: client)
    sagemaker_record(tmp_path, status="completed")
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(io.StringIO()) as out:
        main(["warm-pool", "release", "done"])
    assert client.updates == [{"TrainingJobName": "done", "ResourceConfig": {"KeepAlivePeriodInSeconds": 0}}]
    assert "released  the warm pool of done" in out.getvalue()


def test_a_target_without_pools_refuses_in_one_line(tmp_path):
    records.save(records.RunRecord(run_dir=str(tmp_path), run_id="here", target="local", handle={"x": 1}))
    with (
        contextlib.chdir(tmp_path),
        contextlib.redirect_stderr(io.StringIO()) as err,
        pytest.raises(SystemExit) as exit_,
    ):
        main(["warm-pool", "release", "here"])
    assert exit_.value.code == 2
    assert err.getvalue() == "dockyard: error: run: target=local keeps no warm pools; give a SageMaker run\n"
