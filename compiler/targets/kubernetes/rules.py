"""The Kubernetes target's own rules: what its manifests need from the config that other targets do not."""

from compiler.spec import DataSource, KubernetesTarget, Plan
from compiler.spec.errors import ConfigError
from compiler.targets.kubernetes import validate


def check(plan: Plan) -> list[str]:
    """Raise a ConfigError naming the key for what cannot run; return warnings for what runs but may surprise."""
    target = plan.target
    if not isinstance(target, KubernetesTarget):
        raise validate.wrong_target(target)
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
