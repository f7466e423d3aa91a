"""`target.secrets`: tracker credentials (and any other variable) reach SageMaker's and Kubernetes's nodes
from secrets, never as values in the plan or the request. SageMaker's request names the Secrets Manager ARN
and the entrypoint reads it with the job's role (moto's server over HTTP); Kubernetes's manifests carry
secretKeyRefs, checked against the API's schemas."""

import json

import pytest

from compiler.spec.contract import SECRET_PREFIX
from compiler.spec.errors import ConfigError
from compiler.targets.kubernetes import translate as kubernetes
from compiler.targets.sagemaker import translate as sagemaker
from entrypoint.launcher.secrets import with_secrets
from tests.helpers import plan_for
from tests.test_kubernetes_target import check_schemas
from tests.test_pretrained_targets import IMAGE, SAGEMAKER

VALUES = {"MLFLOW_TRACKING_TOKEN": "mlflow-token-never-in-a-request", "WANDB_API_KEY": "wandb-key-never-in-a-request"}
MLFLOW = ("trainer.trackers=[mlflow,wandb]", "trainer.mlflow.tracking_uri=https://mlflow.example.com")


def test_sagemaker_reads_tracker_credentials_from_secrets_manager(aws):
    arns = {
        name: aws.client("secretsmanager").create_secret(Name=name.lower(), SecretString=value)["ARN"]
        for name, value in VALUES.items()
    }
    plan = plan_for(*SAGEMAKER, *MLFLOW, *(f"+target.secrets.{name}={arn}" for name, arn in arns.items()))
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-secrets-1", job_prefix="s3://dockyard-jobs/s-1")
    environment = request.create_training_job["Environment"]
    assert {SECRET_PREFIX + name: arn for name, arn in arns.items()}.items() <= environment.items()
    shown = plan.to_json() + json.dumps(request.create_training_job)
    assert not any(value in shown for value in VALUES.values())
    environ = with_secrets({**environment, "MLFLOW_TRACKING_TOKEN": "set-by-the-user"})
    assert environ["MLFLOW_TRACKING_TOKEN"] == "set-by-the-user" and environ["WANDB_API_KEY"] == VALUES["WANDB_API_KEY"]
    unreadable = {SECRET_PREFIX + "WANDB_API_KEY": arns["WANDB_API_KEY"].replace("wandb", "gone")}
    with pytest.raises(ConfigError, match=r"^target.secrets.WANDB_API_KEY: cannot be read with the job's role"):
        with_secrets({**unreadable, "AWS_REGION": "us-east-1"})


def test_kubernetes_references_secrets_by_name_and_key(crds):
    plan = plan_for(
        "target=kubernetes",
        *MLFLOW,
        "+target.secrets.MLFLOW_TRACKING_PASSWORD=mlflow-login/password",
        "+target.secrets.WANDB_API_KEY=wandb",
    )
    request = kubernetes.to_request(plan, IMAGE, run_id="secrets-20261126-000000")
    pods = [m for m in request.manifests if m["kind"] != "ConfigMap"]
    text = json.dumps(pods)
    password = {"name": "mlflow-login", "key": "password"}
    assert json.dumps({"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": {"secretKeyRef": password}}) in text
    assert (
        json.dumps({"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "WANDB_API_KEY"}}})
        in text
    )
    check_schemas(request, crds)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((*SAGEMAKER, "+target.secrets.WANDB_API_KEY=wandb"), r"^target.secrets.WANDB_API_KEY: "),
        ((*SAGEMAKER, "+target.secrets.MY-KEY=arn"), r"^target.secrets.MY-KEY: is not an environment variable name"),
        (
            (*SAGEMAKER, "+target.environment.WANDB_MODE=offline", "+target.secrets.WANDB_MODE=x"),
            r"^target.secrets.WANDB_MODE: is also in target.environment",
        ),
    ],
)
def test_a_wrong_sagemaker_secret_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        plan_for(*overrides)


def test_a_wrong_kubernetes_secret_is_one_line():
    """The refusal does not repeat the value: a token pasted where the Secret's name belongs would leak."""
    message = r"^target.secrets.WANDB_API_KEY: the value given \(10 characters, not shown: .*\) is not a Secret's name"
    with pytest.raises(ConfigError, match=message):
        plan_for("target=kubernetes", "+target.secrets.WANDB_API_KEY=Wandb_Keys/key")  # checked when planning
