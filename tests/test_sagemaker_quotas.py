"""The account's quotas before CreateTrainingJob. moto's server has no Service Quotas API, so the quotas
come from `FakeQuotas`, a stand-in for the one client call made (`list_service_quotas`, paginated);
SageMaker's own calls go to moto's server over HTTP."""

import io

import pytest
from botocore.exceptions import ClientError

from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import quotas
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.helpers import plan_for

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"


class FakeQuotas:
    """Service Quotas' `list_service_quotas` paginator over fixed quotas, or refusing like an account
    without the `servicequotas:ListServiceQuotas` permission."""

    def __init__(self, values: dict[str, float], denied: bool = False) -> None:
        self.quotas = [
            {"QuotaName": name, "QuotaCode": f"L-{n:08X}", "Value": v} for n, (name, v) in enumerate(values.items())
        ]
        self.denied = denied

    def get_paginator(self, operation: str):
        assert operation == "list_service_quotas"
        return self

    def paginate(self, ServiceCode: str):
        assert ServiceCode == "sagemaker"
        if self.denied:
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "ListServiceQuotas"
            )
        yield {"Quotas": self.quotas[:2]}
        yield {"Quotas": self.quotas[2:]}


DEFAULTS = {  # a new account's values for p4d (AWS's defaults: 0 GPU instances until raised)
    "ml.p4d.24xlarge for training job usage": 0,
    "ml.p4d.24xlarge for spot training job usage": 0,
    "ml.p4d.24xlarge for training warm pool usage": 0,
    quotas.ALL_JOBS: 4,
    quotas.PER_JOB: 20,
    quotas.LONGEST_RUN: 432000,
}


def job(*overrides: str) -> dict:
    plan = plan_for("experiment=gpt2-124m-p4d", ROLE, *overrides)
    return sagemaker.to_request(plan, "img", run_id="q-1", job_prefix="s3://dockyard-jobs/q-1").create_training_job


def raised(values: dict[str, float], *overrides: str, aws) -> ConfigError:
    with pytest.raises(ConfigError) as error:
        quotas.check(job(*overrides), FakeQuotas(values), aws.client("sagemaker"))
    return error.value


def test_a_type_the_account_has_none_of_is_refused_with_the_raise_command(aws):
    error = raised(DEFAULTS, aws=aws)
    assert error.key == "hardware.nodes"
    assert "needs 1 against the account's quota 'ml.p4d.24xlarge for training job usage' of 0" in error.one_line()
    assert "--service-code sagemaker --quota-code L-00000000 --desired-value 1" in error.fix


ON_DEMAND_RAISED = {**DEFAULTS, "ml.p4d.24xlarge for training job usage": 8}


@pytest.mark.parametrize(
    ("overrides", "key", "quota"),
    [
        (["target.spot=true", "target.max_wait_hours=30"], "hardware.nodes", "spot training job usage"),
        (["target.max_run_hours=200"], "target.max_run_hours", quotas.LONGEST_RUN),
        (["target.keep_alive_seconds=600"], "target.keep_alive_seconds", "warm pool usage"),
        (["hardware.nodes=5"], "hardware.nodes", quotas.ALL_JOBS),
    ],
)
def test_each_quota_names_its_key(aws, overrides, key, quota):
    error = raised(ON_DEMAND_RAISED, *overrides, aws=aws)
    assert error.key == key and quota in error.message


def test_a_job_within_every_quota_passes(aws):
    enough = {**ON_DEMAND_RAISED, "ml.p4d.24xlarge for training warm pool usage": 2}
    quotas.check(job("target.keep_alive_seconds=600"), FakeQuotas(enough), aws.client("sagemaker"))


def test_jobs_in_progress_hold_their_instances():
    running = [
        {"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2}},
        {"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1}, "EnableManagedSpotTraining": True},
        {"ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}},
    ]
    needs = {name: (needed, in_use) for name, _, needed, in_use in quotas._needs(job("hardware.nodes=5"), running)}
    assert needs["ml.p4d.24xlarge for training job usage"] == (5, 2)
    assert needs[quotas.ALL_JOBS] == (5, 4)


def test_without_permission_it_warns_and_goes_on(aws):
    printed = io.StringIO()
    quotas.check(job(), FakeQuotas(DEFAULTS, denied=True), aws.client("sagemaker"), out=printed)
    assert printed.getvalue().startswith("dockyard: warning: the account's SageMaker quotas cannot be read")


def test_submit_reads_the_quotas_first(aws, capsys):
    """moto's server has no Service Quotas API: submit warns and creates the job, as with a denied read."""
    plan = plan_for("experiment=gpt2-124m-p4d", ROLE)
    request = sagemaker.to_request(plan, "img", run_id="q-moto-1", job_prefix="s3://dockyard-jobs/q-moto-1")
    assert sagemaker_submit.submit(request, plan.to_json(), aws) == "q-moto-1"
    assert "quotas cannot be read" in capsys.readouterr().err
