"""Registers the schemas with Hydra's ConfigStore.

The primary schema (`Config`) types every group's node, so the YAML options of single-schema groups are
validated against it while Hydra composes: unknown keys and wrong types fail with the key's full path.
Targets differ in their fields, so each `target/` option names its own schema first in its defaults
list (`- /schema/target/sagemaker@_here_`).
"""

from hydra.core.config_store import ConfigStore

from compiler.spec import schema
from compiler.spec.plan import TARGETS_BY_KIND


def register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=schema.Config)
    for name, node in TARGETS_BY_KIND.items():
        store.store(group="schema/target", name=name, node=node)
