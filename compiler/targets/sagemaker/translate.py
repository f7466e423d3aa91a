"""The SageMaker target's translator: plan + image → the CreateTrainingJob request, checked by botocore.

Pure: the run id and the job's S3 prefix are arguments. The plan reaches the job as the `plan` channel
(an S3 prefix holding plan.json), so it never meets the hyperparameter limits; the container finds it
through DOCKYARD_PLAN, exactly as in the local target.
"""

import json
from dataclasses import dataclass, field

from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

from compiler.spec import Plan
from compiler.spec.contract import (
    CONTAINER_ROOT,
    METRICS_SEPARATORS,
    OUTPUT_DATA_DIR,
    PLAN_CHANNEL,
    PLAN_PATH,
    PRETRAINED_CHANNEL,
    REPORTED_METRICS,
    SECRET_PREFIX,
    TENSORBOARD_DIR,
)
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataSource, Entry, SageMakerTargetConfig
from compiler.spec.schema.target import secret_references
from compiler.targets.channels import CheckpointSource, checkpoint_source
from compiler.targets.sagemaker import rules

FILE_SYSTEM_TYPES = {DataSource.fsx: "FSxLustre", DataSource.efs: "EFS"}
NUMBER = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"


def metric_definitions() -> list[dict[str, str]]:
    """A regex per reported metric, for the `"<name>": <number>` pairs of the trainer's metrics lines."""
    key_value = METRICS_SEPARATORS[1]  # no regex syntax in it
    return [{"Name": name, "Regex": f'"{name}"{key_value}{NUMBER}'} for name in REPORTED_METRICS]


@dataclass(frozen=True)
class SageMakerRequest:
    region: str
    plan_uri: str
    """Where submit() uploads plan.json: the `plan` channel's S3 prefix."""
    create_training_job: dict
    """Exactly the parameters of CreateTrainingJob."""
    uploads: dict[str, str] = field(default_factory=dict)
    """Folders of this machine submit() copies to S3 first (folder -> s3:// prefix): a checkpoint folder."""

    @property
    def run_id(self) -> str:
        return self.create_training_job["TrainingJobName"]

    @property
    def image(self) -> str:
        return self.create_training_job["AlgorithmSpecification"]["TrainingImage"]

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "region": self.region,
                    "plan_uri": self.plan_uri,
                    "uploads": self.uploads,
                    "CreateTrainingJob": self.create_training_job,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )

    def __str__(self) -> str:
        return self.to_json()


def to_request(plan: Plan, image: str, *, run_id: str, job_prefix: str) -> SageMakerRequest:
    """`job_prefix` is an s3:// prefix for this job's plan, output and (by default) checkpoints."""
    target = plan.target
    if not isinstance(target, SageMakerTargetConfig):
        raise ConfigError("target", f"plan is for target {target.kind.value}, not sagemaker", "use target=sagemaker")
    if target.role_arn is None:
        raise ConfigError("target.role_arn", "is missing", "set target.role_arn=arn:aws:iam::<account>:role/<name>")
    plan_uri = f"{job_prefix.rstrip('/')}/{PLAN_CHANNEL}/"
    parameters = {
        "TrainingJobName": run_id,
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "MetricDefinitions": metric_definitions(),
        },
        "RoleArn": target.role_arn,
        "InputDataConfig": [
            _s3_channel(PLAN_CHANNEL, plan_uri, "File"),
            *_pretrained_channel(plan, job_prefix),
            *_data_channels(plan),
        ],
        "OutputDataConfig": {"S3OutputPath": target.output_uri or f"{job_prefix.rstrip('/')}/output"},
        "ResourceConfig": {
            **_instances(plan),
            "VolumeSizeInGB": target.volume_size_gb,
            **({"KeepAlivePeriodInSeconds": target.keep_alive_seconds} if target.keep_alive_seconds else {}),
        },
        "StoppingCondition": {
            "MaxRuntimeInSeconds": round(target.max_run_hours * 3600),
            **({"MaxWaitTimeInSeconds": round(target.max_wait_hours * 3600)} if target.spot else {}),
        },
        "EnableManagedSpotTraining": target.spot,
        "CheckpointConfig": {
            "S3Uri": target.checkpoint_uri or f"{job_prefix.rstrip('/')}/checkpoints",
            "LocalPath": f"{CONTAINER_ROOT}/checkpoints",
        },
        "EnableNetworkIsolation": target.network_isolation,
        "EnableInterContainerTrafficEncryption": target.inter_container_encryption,
        "Environment": {
            **target.environment,
            "DOCKYARD_PLAN": PLAN_PATH,
            "DOCKYARD_RUN_ID": run_id,
            **{SECRET_PREFIX + name: arn for name, arn in secret_references(target).items()},
        },
        "HyperParameters": _hyperparameters(plan),
        "Tags": [{"Key": "dockyard:plan", "Value": plan.content_hash}, {"Key": "dockyard:name", "Value": plan.name}],
    }
    if "tensorboard" in plan.trainer.trackers:  # uploaded as the job runs, not only at its end as output/data is
        parameters["TensorBoardOutputConfig"] = {
            "S3OutputPath": f"{job_prefix.rstrip('/')}/{TENSORBOARD_DIR}",
            "LocalPath": f"{OUTPUT_DATA_DIR}/{TENSORBOARD_DIR}",
        }
    if target.max_retries:
        parameters["RetryStrategy"] = {"MaximumRetryAttempts": target.max_retries}
    if target.subnets:
        parameters["VpcConfig"] = {"SecurityGroupIds": list(target.security_groups), "Subnets": list(target.subnets)}
    check_with_botocore(parameters)
    source = checkpoint_source(plan)
    uploads = {plan.model.path: pretrained_upload_uri(job_prefix)} if source is CheckpointSource.folder else {}
    return SageMakerRequest(region=target.region, plan_uri=plan_uri, create_training_job=parameters, uploads=uploads)


def _s3_channel(name: str, uri: str, input_mode: str) -> dict:
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}, "InputMode": input_mode}


def _instances(plan: Plan) -> dict:
    """One instance type and count, or a heterogeneous cluster's InstanceGroups, the training group first."""
    hardware = plan.hardware
    if not hardware.groups:
        return {"InstanceType": f"ml.{plan.instance.name}", "InstanceCount": plan.layout.nodes}
    groups = [(hardware.train_group, plan.instance.name, plan.layout.nodes)]
    groups += [(name, group.instance_type.removeprefix("ml."), group.count) for name, group in hardware.groups.items()]
    return {
        "InstanceGroups": [
            {"InstanceGroupName": name, "InstanceType": f"ml.{instance_type}", "InstanceCount": count}
            for name, instance_type, count in groups
        ]
    }


def _pretrained_channel(plan: Plan, job_prefix: str) -> list[dict]:
    """A checkpoint on S3 arrives as the `pretrained` channel, which SageMaker copies to every node before the
    job starts; a folder of this machine is uploaded under the job's prefix first (a Hub id is fetched by the
    nodes)."""
    source = checkpoint_source(plan)
    if source is CheckpointSource.s3:
        return [_s3_channel(PRETRAINED_CHANNEL, plan.model.path, "File")]
    if source is CheckpointSource.folder:
        return [_s3_channel(PRETRAINED_CHANNEL, pretrained_upload_uri(job_prefix), "File")]
    return []


def pretrained_upload_uri(job_prefix: str) -> str:
    return f"{job_prefix.rstrip('/')}/{PRETRAINED_CHANNEL}/"


def _data_channels(plan: Plan) -> list[dict]:
    data = plan.data
    if data.source is DataSource.s3:
        channel = _s3_channel(data.channel, data.uri, data.input_mode.value)
        if data.groups:
            channel["DataSource"]["S3DataSource"]["InstanceGroupNames"] = list(data.groups)
        return [channel]
    if data.source in FILE_SYSTEM_TYPES:
        file_system = {
            "FileSystemId": data.file_system_id,
            "FileSystemAccessMode": "ro",
            "FileSystemType": FILE_SYSTEM_TYPES[data.source],
            "DirectoryPath": data.path,
        }
        if data.groups:
            raise ConfigError("data.groups", f"SageMaker assigns only S3 channels to groups, not {data.source.value}")
        return [{"ChannelName": data.channel, "DataSource": {"FileSystemDataSource": file_system}, "InputMode": "File"}]
    return []  # synthetic data needs no channel


def _hyperparameters(plan: Plan) -> dict[str, str]:
    """A user script's hyperparameters, each JSON-encoded into a string as SageMaker's SDK does."""
    if plan.trainer.entry is not Entry.script:
        return {}
    return {key: json.dumps(value) for key, value in plan.trainer.hyperparameters.items()}


def check_with_botocore(parameters: dict) -> None:
    """Validate against botocore's own model of CreateTrainingJob: shapes, required members, ranges."""
    try:
        validate_parameters(parameters, rules.model().operation_model("CreateTrainingJob").input_shape)
    except ParamValidationError as error:
        report = error.kwargs["report"]
        key = next((key for field, key in REQUEST_KEYS.items() if f"parameter {field}" in report), "target")
        raise ConfigError(key, f"SageMaker would reject the job: {report.splitlines()[0]}") from None


REQUEST_KEYS = {
    "TrainingJobName": "name",
    "RoleArn": "target.role_arn",
    "ResourceConfig.VolumeSizeInGB": "target.volume_size_gb",
    "ResourceConfig.KeepAlivePeriodInSeconds": "target.keep_alive_seconds",
    "ResourceConfig.InstanceCount": "hardware.nodes",
    "StoppingCondition.MaxRuntimeInSeconds": "target.max_run_hours",
    "StoppingCondition.MaxWaitTimeInSeconds": "target.max_wait_hours",
    "RetryStrategy": "target.max_retries",
    "VpcConfig.Subnets": "target.subnets",
    "VpcConfig.SecurityGroupIds": "target.security_groups",
    "Environment": "target.environment",
    "HyperParameters": "trainer.hyperparameters",
    "OutputDataConfig": "target.output_uri",
    "CheckpointConfig": "target.checkpoint_uri",
    "InputDataConfig": "data",
}
"""The config key behind each part of the request, for botocore's reports."""
