"""Defaults from the caller's account, as SageMaker's SDK takes them: the account's ECR and its
`sagemaker-<region>-<account>` bucket, read with STS from moto's server over HTTP."""

import json

import pytest

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan, with_account_defaults
from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import account
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.hostile import invoke

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
SMOKE = ["experiment=smoke", "target=sagemaker", "hardware=ml.m5.xlarge", ROLE]
MOTO_ACCOUNT = "123456789012"  # the account moto's STS answers with
REGISTRY = f"{MOTO_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
BUCKET = f"sagemaker-us-east-1-{MOTO_ACCOUNT}"


def test_the_dry_run_takes_and_says_the_accounts_defaults(aws_env, tmp_path):
    outcome = invoke(["launch", "--dry-run", *SMOKE], tmp_path)
    assert outcome.status == 0, outcome.stderr
    job = json.loads(outcome.stdout)["CreateTrainingJob"]
    assert job["AlgorithmSpecification"]["TrainingImage"].startswith(f"{REGISTRY}/dockyard/smoke:")
    assert job["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/dockyard"
    assert f"image.registry defaults to {REGISTRY} (the caller's account)" in outcome.stderr
    assert f"target.output_uri defaults to s3://{BUCKET}/dockyard" in outcome.stderr


def test_what_the_config_sets_is_kept_and_nothing_is_asked(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: any call would fail
    config = compose_config([*SMOKE, "image.registry=r.example.com", "target.output_uri=s3://my-bucket/x"])
    assert with_account_defaults(config) == config


@pytest.mark.parametrize(
    ("given", "key"), [((), "image.registry"), (("image.registry=r.example.com",), "target.output_uri")]
)
def test_without_credentials_the_error_names_the_unset_key_and_the_fix(monkeypatch, tmp_path, given, key):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError, match=rf"^{key}: is unset, and the caller's AWS account cannot be read") as raised:
        with_account_defaults(compose_config([*SMOKE, *given]))
    fix = raised.value.one_line()
    assert "target.output_uri=s3://<bucket>/<prefix>" in fix
    assert ("image.registry=<account>" in fix) == (key == "image.registry")


def test_submit_creates_the_default_bucket_like_the_sdk(aws):
    plan = checked_plan(with_account_defaults(compose_config(SMOKE)))
    request = sagemaker.to_request(plan, f"{REGISTRY}/dockyard/smoke@sha256:{'0' * 64}", run_id="smoke-1",
                                   job_prefix=f"{plan.target.output_uri}/smoke-1")  # fmt: skip
    assert BUCKET not in [b["Name"] for b in aws.client("s3").list_buckets()["Buckets"]]
    assert sagemaker_submit.submit(request, plan.to_json(), aws) == "smoke-1"
    assert BUCKET in [b["Name"] for b in aws.client("s3").list_buckets()["Buckets"]]
    job = sagemaker_submit.describe("smoke-1", aws)
    assert job["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"


def test_another_bucket_is_never_created(aws):
    assert not account.create_default_bucket("someone-elses-bucket", "us-east-1", aws)
    assert not account.create_default_bucket(f"sagemaker-us-east-1-{'9' * 12}", "us-east-1", aws)
    names = [b["Name"] for b in aws.client("s3").list_buckets()["Buckets"]]
    assert "someone-elses-bucket" not in names and f"sagemaker-us-east-1-{'9' * 12}" not in names
