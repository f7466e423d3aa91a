"""The Kubernetes target's own rules: what its manifests need from the config that other targets do not."""

from compiler.spec import DataSource, KubernetesTargetConfig, Plan
from compiler.spec.errors import ConfigError
from compiler.targets.channels import check_checkpoint_reachable
from compiler.targets.kubernetes import validate

MAX_PODS = 100_000
"""The Job API's limit on an Indexed Job's parallelism (`maxParallelismForIndexedJob`), which JobSet's jobs
are too; a PyTorchJob that large has no cluster to run on either (each pod takes a node of its own)."""


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
