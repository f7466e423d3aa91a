"""Registers the schemas with Hydra's ConfigStore.

The primary schema (`Config`) types every group's node, so the YAML options of single-schema groups are
validated against it while Hydra composes: unknown keys and wrong types fail with the key's full path.
Targets differ in their fields, so each `target/` option names its own schema first in its defaults
list (`- /schema/target/sagemaker@_here_`).

Every instance type of the catalog is a `hardware` option under its own name and SageMaker's `ml.` name
(`hardware=g5.12xlarge`, `hardware=ml.m5.xlarge`), so the catalog is the one list of types; a YAML file in
`conf/hardware/` (`cpu.yaml`) comes first. `image=auto` (the default) picks the image family for the
chosen hardware through the `image_for_hardware` group, one option per hardware name (see conf/config.yaml).
Those ~280 options are stored as `LazyNode`s, made into OmegaConf nodes only when Hydra loads one, so
a command pays for the hardware it names, not for the whole catalog (~60 ms at start-up).

Every later `ConfigStore.store` is lazy the same way (`store_lazily`): Hydra's plug-in scan, which every command
runs, imports each installed plug-in, and their modules store their schemas as they load (the Optuna sweeper's
~10 ms a command), although a command reads at most the launcher and sweeper it names.
"""

from typing import Any

from hydra.core.config_store import ConfigNode, ConfigStore
from omegaconf import DictConfig, OmegaConf

from compiler.core.catalog import INSTANCE_TYPES, LOCAL_CPU, SAGEMAKER_PREFIX
from compiler.spec import schema
from compiler.spec.plan import TARGETS_BY_KIND

PROVIDER = "dockyard"
"""Names dockyard as the entries' source (`compiler.config.stored` keeps bases on disk only when every
entry has one)."""


def register() -> None:
    store = ConfigStore.instance()
    _lazy_store(store, "base_config", schema.Config, provider=PROVIDER)  # a command whose base is stored never reads it
    for name, node in TARGETS_BY_KIND.items():  # a command composes one target's schema, not all four
        _lazy_store(store, name, node, "schema/target", provider=PROVIDER)
    for instance in INSTANCE_TYPES.values():
        image = "cuda" if instance.has_gpus else "cpu-local"
        names = [instance.name] if instance is LOCAL_CPU else [instance.name, SAGEMAKER_PREFIX + instance.name]
        for name in names:
            if instance is not LOCAL_CPU:  # conf/hardware/cpu.yaml sets its process count
                _lazy_store(store, name, {"instance_type": instance.name}, "hardware", provider=PROVIDER)
            _lazy_store(
                store, f"auto-{name}", {"defaults": [f"/image/{image}@_here_"]}, "image_for_hardware", provider=PROVIDER
            )


def store_lazily() -> None:
    """From now on, `ConfigStore.store` keeps what it is given and makes its node when Hydra reads it (idempotent)."""
    ConfigStore.store = _lazy_store  # type: ignore[method-assign]


def _lazy_store(
    self: ConfigStore,
    name: str,
    node: Any,
    group: str | None = None,
    package: str | None = None,
    provider: str | None = None,
) -> None:
    """`ConfigStore.store(name, node, group, package, provider)`, its node made on first read."""
    folder = self.repo
    for part in group.split("/") if group else ():
        folder = folder.setdefault(part, {})
    name = name if name.endswith(".yaml") else f"{name}.yaml"
    folder[name] = LazyNode(name, node, group, package, provider)


class LazyNode(ConfigNode):
    """A ConfigStore entry whose OmegaConf node is made from `content` (a map or a schema class) when read
    (Hydra reads `node` from a copy of the entry and deep-copies it, so the entry itself stays as stored)."""

    def __init__(self, name: str, content: Any, group: str | None, package: str | None, provider: str | None) -> None:
        self.name, self.group, self.package, self.provider = name, group, package, provider
        self.content = content
        self._node: DictConfig | None = None

    @property  # type: ignore[override]
    def node(self) -> DictConfig:
        if self._node is None:
            self._node = OmegaConf.structured(self.content)
        return self._node

    @node.setter
    def node(self, value: DictConfig) -> None:
        self._node = value
