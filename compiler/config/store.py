"""Registers the schemas with Hydra's ConfigStore.

The primary schema (`Config`) types every group's node, so the YAML options of single-schema groups are
validated against it while Hydra composes: unknown keys and wrong types fail with the key's full path.
Targets differ in their fields, so each `target/` option names its own schema first in its defaults
list (`- /schema/target/sagemaker@_here_`).

Every instance type of the catalog is a `hardware` option under its own name and SageMaker's `ml.` name
(`hardware=g5.12xlarge`, `hardware=ml.m5.xlarge`), so the catalog is the one list of types; a YAML file in
`conf/hardware/` (`cpu.yaml`) comes first. `image=auto` (the default) picks the image family for the
chosen hardware through the `image_for_hardware` group, one option per hardware name (see conf/config.yaml).
"""

from hydra.core.config_store import ConfigStore

from compiler.core.catalog import INSTANCE_TYPES, LOCAL_CPU, SAGEMAKER_PREFIX
from compiler.spec import schema
from compiler.spec.plan import TARGETS_BY_KIND


def register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=schema.Config)
    for name, node in TARGETS_BY_KIND.items():
        store.store(group="schema/target", name=name, node=node)
    for instance in INSTANCE_TYPES.values():
        image = "cuda" if instance.has_gpus else "cpu-local"
        names = [instance.name] if instance is LOCAL_CPU else [instance.name, SAGEMAKER_PREFIX + instance.name]
        for name in names:
            if instance is not LOCAL_CPU:  # conf/hardware/cpu.yaml sets its process count
                store.store(group="hardware", name=name, node={"instance_type": instance.name})
            store.store(group="image_for_hardware", name=f"auto-{name}", node={"defaults": [f"/image/{image}@_here_"]})
