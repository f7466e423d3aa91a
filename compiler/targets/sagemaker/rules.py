"""SageMaker's own rules: the limits of CreateTrainingJob that botocore's `validate_parameters` does not
check (it checks minimums only), and what SageMaker needs that other targets do not."""

import re

from compiler.planner.rules import check_s3_uri
from compiler.spec import DataSource, Plan, SageMakerTarget
from compiler.spec.errors import ConfigError

ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
REGION = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d")
SUBNET, SECURITY_GROUP = re.compile(r"subnet-[0-9a-f]{8,17}"), re.compile(r"sg-[0-9a-f]{8,17}")
MAX_RUN_HOURS = 28 * 24
MAX_RETRIES = 30
MAX_KEEP_ALIVE_SECONDS = 3600
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_ENVIRONMENT = 100


def check(plan: Plan) -> list[str]:
    """SageMaker's own limits (CreateTrainingJob's constraints), for a plan that targets it."""
    target = plan.target
    if not isinstance(target, SageMakerTarget):
        raise ConfigError("target", f"plan is for target {target.kind.value}, not sagemaker", "use target=sagemaker")
    if not 0 <= target.max_retries <= MAX_RETRIES:
        raise ConfigError(
            "target.max_retries", f"SageMaker retries a job at most {MAX_RETRIES} times (got {target.max_retries})"
        )
    if plan.data.source in (DataSource.fsx, DataSource.efs) and not (target.subnets and target.security_groups):
        raise ConfigError(
            "target.subnets",
            f"SageMaker reaches {plan.data.source.value} only inside a VPC",
            "set target.subnets and target.security_groups to the file system's VPC",
        )
    if target.max_run_hours > MAX_RUN_HOURS:
        raise ConfigError(
            "target.max_run_hours",
            f"SageMaker stops jobs after 28 days ({MAX_RUN_HOURS} h)",
            "checkpoint and continue in a new job for longer runs",
        )
    if not REGION.fullmatch(target.region):
        raise ConfigError("target.region", f"'{target.region}' is not an AWS region", "use a name like us-east-1")
    if target.role_arn is not None and not ROLE_ARN.fullmatch(target.role_arn):
        raise ConfigError(
            "target.role_arn", f"'{target.role_arn}' is not an IAM role ARN", "use arn:aws:iam::<account>:role/<name>"
        )
    for key in ("output_uri", "checkpoint_uri"):
        if getattr(target, key) is not None:
            check_s3_uri(f"target.{key}", getattr(target, key))
    if target.spot:
        if target.max_wait_hours is None or target.max_wait_hours < target.max_run_hours:
            raise ConfigError(
                "target.max_wait_hours",
                "managed spot needs a wait at least as long as the run",
                f"set target.max_wait_hours >= target.max_run_hours ({target.max_run_hours})",
            )
        if target.keep_alive_seconds:
            raise ConfigError(
                "target.keep_alive_seconds",
                "warm pools do not work with managed spot",
                "set target.keep_alive_seconds=0 or target.spot=false",
            )
    elif target.max_wait_hours is not None:
        raise ConfigError("target.max_wait_hours", "applies only to managed spot", "set target.spot=true or remove it")
    if not 0 <= target.keep_alive_seconds <= MAX_KEEP_ALIVE_SECONDS:
        raise ConfigError("target.keep_alive_seconds", f"must be between 0 and {MAX_KEEP_ALIVE_SECONDS}")
    if bool(target.subnets) != bool(target.security_groups):
        raise ConfigError(
            "target.security_groups" if target.subnets else "target.subnets",
            "a VPC config needs both subnets and security groups",
            "set both, or neither",
        )
    for key, pattern, ids in (
        ("subnets", SUBNET, target.subnets),
        ("security_groups", SECURITY_GROUP, target.security_groups),
    ):
        for value in ids:
            if not pattern.fullmatch(value):
                raise ConfigError(f"target.{key}", f"'{value}' is not a {key[:-1].replace('_', ' ')} id")
    if len(target.environment) > MAX_ENVIRONMENT:
        raise ConfigError("target.environment", f"SageMaker takes at most {MAX_ENVIRONMENT} variables")
    _check_hyperparameters(plan.trainer.hyperparameters)
    return []


def _check_hyperparameters(hyperparameters: dict) -> None:
    if len(hyperparameters) > MAX_HYPERPARAMETERS:
        raise ConfigError(
            "trainer.hyperparameters",
            f"SageMaker takes at most {MAX_HYPERPARAMETERS}, got {len(hyperparameters)}",
            "pass the rest in a config file in trainer.source_dir",
        )
    for name, value in hyperparameters.items():
        if len(name) > MAX_HYPERPARAMETER_KEY:
            raise ConfigError(
                f"trainer.hyperparameters.{name[:40]}...",
                f"SageMaker limits names to {MAX_HYPERPARAMETER_KEY} characters",
                "use a shorter name",
            )
        if len(str(value)) > MAX_HYPERPARAMETER_VALUE:
            raise ConfigError(
                f"trainer.hyperparameters.{name}",
                f"SageMaker limits values to {MAX_HYPERPARAMETER_VALUE} characters",
                "put long values in a file in trainer.source_dir",
            )
