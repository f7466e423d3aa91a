"""The Kubernetes target's own rules: what its manifests need from the config that other targets do not."""

import json

from compiler.spec import DataSource, JobKind, KubernetesTargetConfig, Plan
from compiler.spec.errors import ConfigError
from compiler.targets.channels import check_checkpoint_reachable
from compiler.targets.kubernetes import validate
from compiler.targets.kubernetes.translate import deadline_seconds

MAX_PODS = 100_000
"""The Job API's limit on an Indexed Job's parallelism (`maxParallelismForIndexedJob`), which JobSet's jobs
are too; a PyTorchJob that large has no cluster to run on either (each pod takes a node of its own)."""
INT32_MAX = 2**31 - 1
"""backoffLimit (Job, PyTorchJob) and maxRestarts (JobSet) are int32 fields."""
MAX_ANNOTATIONS = 256 * 1024
"""The API server's limit on one object's annotations, keys and values together (TotalAnnotationSizeLimitB)."""
MAX_CONFIG_MAP = 1024 * 1024
"""The API server's limit on a ConfigMap's data (MaxSecretSize, which ConfigMaps share): the plan travels in one."""
BIG_FIELDS = ("target.environment", "target.labels", "target.annotations", "trainer.hyperparameters",
              "trainer.group_commands", "image.python_packages")  # fmt: skip
"""Where a plan can grow without bound, in the order a message names the largest."""


def check(plan: Plan) -> list[str]:
    """Raise a ConfigError naming the key for what cannot run; return warnings for what runs but may surprise."""
    target = plan.target
    if not isinstance(target, KubernetesTargetConfig):
        raise validate.wrong_target(target)
    if plan.layout.nodes > MAX_PODS:
        raise ConfigError(
            "hardware.nodes",
            f"asks for {plan.layout.nodes} pods, and Kubernetes runs at most {MAX_PODS:,} in one job",
            "use fewer nodes",
        )
    validate.check_config_names(target, plan.data.claim)
    deadline_seconds(target.max_run_hours)
    _check_sizes(plan)
    check_checkpoint_reachable(plan, "Kubernetes")
    if plan.data.source in (DataSource.fsx, DataSource.efs) and plan.data.claim is None:
        raise ConfigError(
            "data.claim",
            f"Kubernetes mounts {plan.data.source.value} through a PersistentVolumeClaim",
            "set data.claim to the claim bound to the file system",
        )
    warnings = []
    if target.claim is None:
        warnings.append(
            "checkpoints and the final model stay in the pods and go with them (and a restarted job cannot "
            "resume); set target.claim to a ReadWriteMany PersistentVolumeClaim to keep them"
        )
    if not plan.image.push:
        warnings.append("image.push is false: every node must already have the image; set image.push=true")
    return warnings


def _check_sizes(plan: Plan) -> None:
    """What the API server stores as int32 or refuses as too large, known before any object exists."""
    target = plan.target
    retries = target.max_retries * (plan.layout.nodes if target.kind_of_job is JobKind.indexed_job else 1)
    if retries > INT32_MAX:
        raise ConfigError(
            "target.max_retries",
            f"makes a backoff limit of {retries}, past the int32 Kubernetes stores (2^31-1)",
            "ask for fewer retries",
        )
    annotations = sum(len(key.encode()) + len(value.encode()) for key, value in target.annotations.items())
    if annotations > MAX_ANNOTATIONS:
        raise ConfigError(
            "target.annotations",
            f"are {annotations:,} bytes, past the {MAX_ANNOTATIONS // 1024} KiB Kubernetes takes on one object",
            "keep large values out of annotations",
        )
    size = len(plan.to_json(indent=2).encode()) + 1
    if size > MAX_CONFIG_MAP:
        largest = max(BIG_FIELDS, key=lambda key: len(json.dumps(_value(plan, key))))
        raise ConfigError(
            largest,
            f"makes the plan {size:,} bytes, past the 1 MiB a ConfigMap holds on Kubernetes",
            "keep large values out of the config",
        )


def _value(plan: Plan, key: str) -> object:
    section, _, name = key.partition(".")
    return getattr(getattr(plan, section), name)
