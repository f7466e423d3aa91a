"""Which module serves each target kind. Adding a target is one line here (and its folder).

Modules are imported on first use, so planning for SageMaker does not import the Docker SDK and the CLI
starts without boto3's clients or the Kubernetes client.
"""

import importlib
from collections.abc import Iterator, Mapping

from compiler.core.capabilities import Capabilities
from compiler.spec.errors import UnknownNameError
from compiler.targets.base import Target

MODULES = {
    "local": "compiler.targets.local",
    "sagemaker": "compiler.targets.sagemaker",
    "kubernetes": "compiler.targets.kubernetes",
    "slurm": "compiler.targets.slurm",
}
"""Target kind -> the package whose `TARGET` implements `compiler.targets.base.Target`."""


def kinds() -> tuple[str, ...]:
    return tuple(MODULES)


def get(kind: str) -> Target:
    """The target for `kind` (a TargetKind's value); an unknown kind is a ConfigError on `target`."""
    if kind not in MODULES:
        raise UnknownNameError("target", "target", kind, MODULES)
    return importlib.import_module(MODULES[kind]).TARGET


def capabilities() -> Mapping[str, Capabilities]:
    """Every target's capabilities by kind; a target is imported only when the planner asks about it (which
    targets mount an FSx file system), so planning for one target does not load the others' clients."""
    return _RegisteredCapabilities()


class _RegisteredCapabilities(Mapping[str, Capabilities]):
    def __getitem__(self, kind: str) -> Capabilities:
        if kind not in MODULES:
            raise KeyError(kind)
        return get(kind).capabilities

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)
