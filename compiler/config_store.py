"""Registers the schemas with Hydra's ConfigStore.

Each group's YAML files name their schema first in their defaults list (`- base_model`), which makes the
composed node typed: unknown keys and wrong types fail at compose time with the key's full path.
"""

from hydra.core.config_store import ConfigStore

from compiler import schema

GROUP_SCHEMAS = {
    "model": {"base_model": schema.ModelConfig},
    "parallelism": {"base_parallelism": schema.ParallelismConfig},
    "hardware": {"base_hardware": schema.HardwareConfig},
    "data": {"base_data": schema.DataConfig},
    "image": {"base_image": schema.ImageConfig},
    "target": {
        "base_local": schema.LocalTarget,
        "base_sagemaker": schema.SageMakerTarget,
        "base_kubernetes": schema.KubernetesTarget,
        "base_slurm": schema.SlurmTarget,
    },
    "trainer": {"base_trainer": schema.TrainerConfig},
}


def register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=schema.Config)
    for group, schemas in GROUP_SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=group, name=name, node=node)
