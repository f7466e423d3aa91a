"""Registers the schemas with Hydra's ConfigStore.

The primary schema (`Config`) types every group's node, so the YAML options of single-schema groups are
validated against it while Hydra composes: unknown keys and wrong types fail with the key's full path.
Targets differ in their fields, so each `target/` option names its own schema first in its defaults
list (`- /schema/target/sagemaker@_here_`).
"""

from hydra.core.config_store import ConfigStore

from compiler import schema

TARGET_SCHEMAS = {
    "local": schema.LocalTarget,
    "sagemaker": schema.SageMakerTarget,
    "kubernetes": schema.KubernetesTarget,
    "slurm": schema.SlurmTarget,
}


def register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=schema.Config)
    for name, node in TARGET_SCHEMAS.items():
        store.store(group="schema/target", name=name, node=node)
