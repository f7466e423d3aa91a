"""Typed schemas of every config group, and so of the Plan's sections: one module per group, all named
here (`schema.ModelConfig`), as the YAML → schema → Plan layers read them.

YAML files in `conf/` extend these dataclasses (see `compiler.config.store`), so a misspelled key or a
value of the wrong type is rejected while Hydra composes the config, before any of dockyard's own
checks run. Cross-field rules live in `compiler.planner`, not here. Standard library only: the image
ships this package, and the entrypoint reads the plan through it.
"""

from compiler.spec.schema.config import (
    Config,
    Job,
)
from compiler.spec.schema.data import (
    RENAMES,
    DataConfig,
    DataFormat,
    DataSource,
    InputMode,
    LossOn,
    Overlong,
    PackingStrategy,
)
from compiler.spec.schema.evaluation import (
    EvalConfig,
)
from compiler.spec.schema.hardware import (
    HardwareConfig,
    InstanceGroup,
)
from compiler.spec.schema.image import (
    DOCUMENT_PACKAGES,
    TRACKER_PINS,
    ImageConfig,
    ImageFamily,
)
from compiler.spec.schema.missing import MISSING
from compiler.spec.schema.model import (
    Activation,
    BaseQuantization,
    Init,
    LatentAttentionConfig,
    LoraConfig,
    ModelConfig,
    MoeConfig,
    Norm,
    Position,
)
from compiler.spec.schema.parallelism import (
    Checkpointing,
    ContextParallelMethod,
    Offload,
    ParallelismConfig,
    Precision,
    Strategy,
)
from compiler.spec.schema.target import (
    ContainerRuntime,
    JobKind,
    KubernetesTargetConfig,
    LocalTargetConfig,
    SageMakerTargetConfig,
    SlurmTargetConfig,
    TargetConfig,
    TargetKind,
)
from compiler.spec.schema.trainer import (
    COMPILE_MODES,
    Compile,
    DpoConfig,
    DpoLoss,
    Entry,
    Launcher,
    LrScaling,
    LrSchedule,
    MlflowConfig,
    Objective,
    TrainerConfig,
    WandbConfig,
    WandbMode,
)

__all__ = [
    "RENAMES",
    "MISSING",
    "Config",
    "Job",
    "DataSource",
    "InputMode",
    "DataConfig",
    "DataFormat",
    "LossOn",
    "Overlong",
    "PackingStrategy",
    "EvalConfig",
    "InstanceGroup",
    "HardwareConfig",
    "ImageFamily",
    "ImageConfig",
    "DOCUMENT_PACKAGES",
    "TRACKER_PINS",
    "Activation",
    "Norm",
    "Position",
    "Init",
    "BaseQuantization",
    "LoraConfig",
    "ModelConfig",
    "MoeConfig",
    "LatentAttentionConfig",
    "Strategy",
    "Checkpointing",
    "ContextParallelMethod",
    "Precision",
    "Offload",
    "ParallelismConfig",
    "TargetKind",
    "TargetConfig",
    "LocalTargetConfig",
    "SageMakerTargetConfig",
    "JobKind",
    "KubernetesTargetConfig",
    "ContainerRuntime",
    "SlurmTargetConfig",
    "Entry",
    "Launcher",
    "LrSchedule",
    "Compile",
    "COMPILE_MODES",
    "LrScaling",
    "Objective",
    "DpoLoss",
    "DpoConfig",
    "TrainerConfig",
    "MlflowConfig",
    "WandbConfig",
    "WandbMode",
]
