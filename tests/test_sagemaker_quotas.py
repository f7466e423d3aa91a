"""The account's quotas before CreateTrainingJob. moto's server has no Service Quotas API for SageMaker, so
the quotas come from a real client with stubbed answers (`quotas_client`), under the names Service Quotas
really uses (tests/data/sagemaker_quotas.json); SageMaker's own calls go to moto's server over HTTP."""

import io
import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import quotas
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.helpers import plan_for

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"


REAL_QUOTAS = json.loads((Path(__file__).parent / "data/sagemaker_quotas.json").read_text())["quotas"]
"""The account's quotas under the names and codes Service Quotas gives them (never dockyard's constants)."""
DEFAULTS = {q["QuotaName"]: q["Value"] for q in REAL_QUOTAS}
P4D = "ml.p4d.24xlarge for training job usage"
WARM_POOL = "ml.p4d.24xlarge for training warm pool usage"
ALL_JOBS, LONGEST_RUN = "Number of instances across all training jobs", "Longest run time for a training job"


def quotas_client(values: dict[str, float], denied: bool = False):
    """A real Service Quotas client with stubbed answers (`botocore.stub.Stubber` checks every call's
    parameters and every answer against the service's model): `values` in two pages, or the refusal an
    account without `servicequotas:ListServiceQuotas` gets."""
    client = boto3.client(
        "service-quotas", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(client)
    asked = {"ServiceCode": "sagemaker"}
    if denied:
        stubber.add_client_error("list_service_quotas", "AccessDeniedException", "not allowed", expected_params=asked)
    else:
        codes = {q["QuotaName"]: q["QuotaCode"] for q in REAL_QUOTAS}
        listed = [
            {"ServiceCode": "sagemaker", "QuotaName": name, "QuotaCode": codes[name], "Value": value}
            for name, value in values.items()
        ]
        stubber.add_response("list_service_quotas", {"Quotas": listed[:2], "NextToken": "page-2"}, asked)
        stubber.add_response("list_service_quotas", {"Quotas": listed[2:]}, {**asked, "NextToken": "page-2"})
    stubber.activate()
    return client


def job(*overrides: str) -> dict:
    plan = plan_for("experiment=gpt2-124m-p4d", ROLE, *overrides)
    return sagemaker.to_request(plan, "img", run_id="q-1", job_prefix="s3://dockyard-jobs/q-1").create_training_job


def raised(values: dict[str, float], *overrides: str, aws) -> ConfigError:
    with pytest.raises(ConfigError) as error:
        quotas.check(job(*overrides), quotas_client(values), aws.client("sagemaker"))
    return error.value


def test_a_type_the_account_has_none_of_is_refused_with_the_raise_command(aws):
    error = raised(DEFAULTS, aws=aws)
    assert error.key == "hardware.nodes"
    assert "needs 1 against the account's quota 'ml.p4d.24xlarge for training job usage' of 0" in error.one_line()
    assert "--service-code sagemaker --quota-code L-09B4A649 --desired-value 1" in error.fix


ON_DEMAND_RAISED = {**DEFAULTS, P4D: 8}


@pytest.mark.parametrize(
    ("overrides", "key", "quota"),
    [
        (["target.spot=true", "target.max_wait_hours=30"], "hardware.nodes", "spot training job usage"),
        (["target.max_run_hours=200"], "target.max_run_hours", LONGEST_RUN),
        (["target.keep_alive_seconds=600"], "target.keep_alive_seconds", "warm pool usage"),
        (["hardware.nodes=5"], "hardware.nodes", ALL_JOBS),
    ],
)
def test_each_quota_names_its_key(aws, overrides, key, quota):
    error = raised(ON_DEMAND_RAISED, *overrides, aws=aws)
    assert error.key == key and quota in error.message


def test_a_job_within_every_quota_passes(aws):
    enough = {**ON_DEMAND_RAISED, WARM_POOL: 2}
    printed = io.StringIO()
    quotas.check(job("target.keep_alive_seconds=600"), quotas_client(enough), aws.client("sagemaker"), out=printed)
    assert printed.getvalue() == ""  # every quota the job meets was found under its real name


def test_a_quota_the_account_does_not_list_is_a_warning_not_a_pass(aws):
    printed = io.StringIO()
    missing = {name: value for name, value in ON_DEMAND_RAISED.items() if name != LONGEST_RUN}
    quotas.check(job(), quotas_client(missing), aws.client("sagemaker"), out=printed)
    assert printed.getvalue() == (
        f"dockyard: warning: the account lists no SageMaker quota '{LONGEST_RUN}' (target.max_run_hours); not checked\n"
    )


def test_jobs_in_progress_hold_their_instances():
    running = [
        {"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2}},
        {"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1}, "EnableManagedSpotTraining": True},
        {"ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}},
    ]
    needs = {name: (needed, in_use) for name, _, needed, in_use in quotas._needs(job("hardware.nodes=5"), running)}
    assert needs[P4D] == (5, 2)
    assert needs[ALL_JOBS] == (5, 4)


def test_without_permission_it_warns_and_goes_on(aws):
    printed = io.StringIO()
    quotas.check(job(), quotas_client(DEFAULTS, denied=True), aws.client("sagemaker"), out=printed)
    assert printed.getvalue().startswith("dockyard: warning: the account's SageMaker quotas cannot be read")


def test_preflight_reads_the_quotas_and_creates_nothing(aws, capsys):
    """moto's server has no Service Quotas API for SageMaker: preflight warns, as with a denied read."""
    plan = plan_for("experiment=gpt2-124m-p4d", ROLE)
    request = sagemaker.to_request(plan, "img", run_id="q-moto-1", job_prefix="s3://dockyard-jobs/q-moto-1")
    sagemaker_submit.preflight(request, aws)
    assert "quotas cannot be read" in capsys.readouterr().err
    jobs = aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    assert "q-moto-1" not in [j["TrainingJobName"] for j in jobs]
    assert sagemaker_submit.submit(request, plan.to_json(), aws) == "q-moto-1"


@pytest.fixture
def served_quotas(aws, monkeypatch):
    """moto's server answering ListServiceQuotas for SageMaker with `REAL_QUOTAS` (its Service Quotas API
    has only VPC's defaults), so `dockyard launch` in a subprocess reads them over HTTP."""
    from moto.servicequotas.responses import ServiceQuotasResponse

    def list_service_quotas(self) -> str:
        assert json.loads(self.body)["ServiceCode"] == "sagemaker"
        return json.dumps({"Quotas": [{"ServiceCode": "sagemaker", **q} for q in REAL_QUOTAS]})

    monkeypatch.setattr(ServiceQuotasResponse, "list_service_quotas", list_service_quotas, raising=False)
    return aws


def account_state(session) -> dict[str, list[str]]:
    """What a launch could create in the account: ECR repositories, buckets, training jobs (moto's server is
    shared by the session's tests, so a test compares them before and after)."""
    jobs = session.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    return {
        "repositories": [r["repositoryName"] for r in session.client("ecr").describe_repositories()["repositories"]],
        "buckets": [b["Name"] for b in session.client("s3").list_buckets()["Buckets"]],
        "jobs": [j["TrainingJobName"] for j in jobs],
    }


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        ([ROLE], "dockyard: error: hardware.nodes: needs 1 against the account's quota 'ml.p4d.24xlarge for"),
        (["target.role_arn=arn:aws:iam::123456789012:role/missing"], "dockyard: error: target.role_arn: role"),
        ([ROLE, "data.uri=s3://no-such-bucket/tokens"], "dockyard: error: data.uri: bucket no-such-bucket"),
    ],
)
def test_launch_refuses_before_building_pushing_or_creating(served_quotas, tmp_path, monkeypatch, overrides, refusal):
    """The registry and the bucket are left to the account (its ECR, `sagemaker-<region>-<account>`), so a
    launch would create an ECR repository at the push and the bucket at submit; the Docker engine named
    cannot be reached, so a build attempted first would fail otherwise."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    default_bucket = served_quotas.resource("s3").Bucket("sagemaker-us-east-1-123456789012")
    if default_bucket.creation_date:  # made by an earlier test's submit
        default_bucket.objects.all().delete()
        default_bucket.delete()
    before = account_state(served_quotas)
    launched = subprocess.run(
        [str(Path(sys.executable).parent / "dockyard"), "launch", "experiment=gpt2-124m-p4d", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert launched.returncode == 2, launched.stderr
    [error] = [line for line in launched.stderr.splitlines() if "error" in line]  # after the defaults' notes
    assert error.startswith(refusal)
    assert account_state(served_quotas) == before
    assert not (tmp_path / "outputs").exists()
