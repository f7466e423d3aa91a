"""SageMaker's own rules: the limits of CreateTrainingJob that botocore's `validate_parameters` does not
check (it checks minimums only), read from botocore's own service model, and what SageMaker needs that
other targets do not."""

import functools
import json
import os
import re
from urllib.parse import urlsplit

import botocore.session

from compiler.core.grammar import ECR_REGISTRY, check_hours, check_s3_uri
from compiler.spec import DataSource, Plan, SageMakerTargetConfig
from compiler.spec.contract import SECRET_PREFIX
from compiler.spec.errors import ConfigError, UnknownNameError, shown, withheld
from compiler.targets.channels import CheckpointSource, checkpoint_source
from compiler.targets.secrets import check_secret_names

SUBNET, SECURITY_GROUP = re.compile(r"subnet-[0-9a-f]{8,17}"), re.compile(r"sg-[0-9a-f]{8,17}")
MAX_RUN_HOURS = 28 * 24
LOOPBACK = re.compile(r"(127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|localhost)(:[0-9]{1,5})?")
"""A host (and port) on this machine."""
RESERVED_ENVIRONMENT = 2
"""DOCKYARD_PLAN and DOCKYARD_RUN_ID, which every request adds to the config's environment."""


@functools.cache
def _session() -> botocore.session.Session:
    """One session for every lookup in botocore's data: each session parses SageMaker's model (2.6 MB of
    JSON, ~40 ms) and the endpoints file again."""
    return botocore.session.get_session()


@functools.cache
def model():
    return _session().get_service_model("sagemaker")


def limit(shape: str, name: str):
    """A constraint (`min`, `max`, `pattern`) of a shape in botocore's model of SageMaker."""
    return model().shape_for(shape).metadata.get(name)


@functools.cache
def regions() -> frozenset[str]:
    session = _session()
    return frozenset(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("sagemaker", partition_name=partition)
    )


def check_shape(key: str, shape: str, value, *, echo: bool = True) -> None:
    """`value` within the shape's length or range, and (a string) matching its whole pattern; `echo=False`
    where a secret may have been pasted (a role's or a secret's ARN): a refusal then never repeats it."""
    low, high, pattern = limit(shape, "min"), limit(shape, "max"), limit(shape, "pattern")
    size = value if isinstance(value, int) else len(value)
    what = "" if isinstance(value, int) else " characters" if isinstance(value, str) else " entries"
    if (low is not None and size < low) or (high is not None and size > high):
        bounds = f"{low}" if high is None else f"{low or 0} to {high}"
        raise ConfigError(key, f"SageMaker takes {bounds}{what} here (got {size}{what})")
    # ASCII classes: botocore's patterns are Java's, where \d is [0-9] (Python's also takes other scripts' digits)
    if isinstance(value, str) and pattern and "\\p" not in pattern and not re.fullmatch(pattern, value, re.ASCII):
        given = shown(value) if echo else withheld(value)
        raise ConfigError(key, f"{given} does not match SageMaker's pattern {pattern}")


def _emulated(registry: str) -> bool:
    """A registry on this machine, which only a SageMaker emulator on this machine too (moto's server, which
    `AWS_ENDPOINT_URL` names in the tests) can pull from; SageMaker's own hosts cannot reach it."""
    endpoint = urlsplit(os.environ.get("AWS_ENDPOINT_URL_SAGEMAKER") or os.environ.get("AWS_ENDPOINT_URL") or "")
    return LOOPBACK.fullmatch(registry) is not None and LOOPBACK.fullmatch(endpoint.netloc) is not None


def check(plan: Plan) -> list[str]:
    """SageMaker's own limits (CreateTrainingJob's constraints), for a plan that targets it."""
    target = plan.target
    if not isinstance(target, SageMakerTargetConfig):
        raise ConfigError("target", f"plan is for target {target.kind.value}, not sagemaker", "use target=sagemaker")
    if target.max_retries:
        check_shape("target.max_retries", "MaximumRetryAttempts", target.max_retries)
    elif target.max_retries < 0:
        raise ConfigError("target.max_retries", f"cannot be negative (got {target.max_retries})")
    if target.region not in regions():
        raise UnknownNameError("target.region", "SageMaker region", target.region, regions())
    check_shape("target.volume_size_gb", "OptionalVolumeSizeInGB", target.volume_size_gb)
    check_shape("target.max_run_hours", "MaxRuntimeInSeconds", round(target.max_run_hours * 3600))
    _check_groups(plan)
    registry = plan.image.registry
    if registry is not None and not (ECR_REGISTRY.fullmatch(registry) or _emulated(registry)):
        raise ConfigError(
            "image.registry",
            f"{shown(registry)} is not an ECR registry, and SageMaker pulls training images only from ECR",
            "push to <account>.dkr.ecr.<region>.amazonaws.com",
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
    if target.role_arn is not None:
        check_shape("target.role_arn", "RoleArn", target.role_arn, echo=False)
    for key in ("output_uri", "checkpoint_uri"):
        if getattr(target, key) is not None:
            check_s3_uri(f"target.{key}", getattr(target, key))
            check_shape(f"target.{key}", "S3Uri", getattr(target, key))
    if target.max_wait_hours is not None:
        check_hours("target.max_wait_hours", target.max_wait_hours)
        check_shape("target.max_wait_hours", "MaxWaitTimeInSeconds", round(target.max_wait_hours * 3600))
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
    check_shape("target.keep_alive_seconds", "KeepAlivePeriodInSeconds", target.keep_alive_seconds)
    if bool(target.subnets) != bool(target.security_groups):
        raise ConfigError(
            "target.security_groups" if target.subnets else "target.subnets",
            "a VPC config needs both subnets and security groups",
            "set both, or neither",
        )
    for key, pattern, shape, ids in (
        ("subnets", SUBNET, "Subnets", target.subnets),
        ("security_groups", SECURITY_GROUP, "VpcSecurityGroupIds", target.security_groups),
    ):
        if ids:
            check_shape(f"target.{key}", shape, ids)
        for value in ids:
            if not pattern.fullmatch(value):
                raise ConfigError(f"target.{key}", f"{shown(value)} is not a {key[:-1].replace('_', ' ')} id")
    _check_environment(target.environment, len(target.secrets))
    _check_hyperparameters(plan.trainer.hyperparameters)
    if target.hub_token_secret is not None:
        check_shape("target.hub_token_secret", "SecretArn", target.hub_token_secret, echo=False)
    for name, arn in check_secret_names(target).items():
        if name in target.secrets:
            check_shape(f"target.secrets.{name}", "SecretArn", arn, echo=False)
            check_shape(f"target.secrets.{name}", "TrainingEnvironmentKey", SECRET_PREFIX + name)
    if checkpoint_source(plan) is CheckpointSource.folder:
        return [
            f"model.path: {plan.model.path} is uploaded to the job's S3 prefix at every launch; upload it once "
            "and set model.path=s3://bucket/prefix to skip that"
        ]
    return []


def _check_groups(plan: Plan) -> None:
    """A heterogeneous cluster: the training group and the others, at most InstanceGroups' limit (5)."""
    if not plan.hardware.groups:
        return
    check_shape("hardware.groups", "InstanceGroups", [plan.hardware.train_group, *plan.hardware.groups])


def _check_environment(environment: dict[str, str], secrets: int) -> None:
    most = limit("EnvironmentMap", "max") - RESERVED_ENVIRONMENT
    if len(environment) + secrets > most:
        raise ConfigError(
            "target.environment", f"SageMaker takes at most {most} variables from the config, secrets included"
        )
    for name, value in environment.items():
        check_shape(f"target.environment.{name}", "TrainingEnvironmentKey", name)
        check_shape(f"target.environment.{name}", "TrainingEnvironmentValue", value)


def _check_hyperparameters(hyperparameters: dict) -> None:
    most = limit("HyperParameters", "max")
    if len(hyperparameters) > most:
        raise ConfigError(
            "trainer.hyperparameters",
            f"SageMaker takes at most {most}, got {len(hyperparameters)}",
            "pass the rest in a config file in trainer.source_dir",
        )
    for name, value in hyperparameters.items():
        key = f"trainer.hyperparameters.{name}"
        check_shape(key if len(name) < 80 else "trainer.hyperparameters", "HyperParameterKey", name)
        check_shape(key, "HyperParameterValue", json.dumps(value))
