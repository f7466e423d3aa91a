"""The primary config: one node per group plus the run's name."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from compiler.spec.schema.data import DataConfig
from compiler.spec.schema.evaluation import EvalConfig
from compiler.spec.schema.hardware import HardwareConfig
from compiler.spec.schema.image import ImageConfig
from compiler.spec.schema.missing import MISSING
from compiler.spec.schema.model import ModelConfig
from compiler.spec.schema.parallelism import ParallelismConfig
from compiler.spec.schema.trainer import TrainerConfig


class Job(Enum):
    """What a plan's job does on its nodes; the verbs set it (`dockyard tokenize`, `dockyard eval`)."""

    train = "train"
    tokenize = "tokenize"
    """Fills the token cache (`data.cache`), the nodes splitting the documents among them, and ends."""
    evaluate = "evaluate"
    """Runs lm-evaluation-harness once on `model.path` (`eval.tasks`), on one node."""


@dataclass
class Config:
    """The primary config: one node per group plus the run's name."""

    name: str = MISSING
    """The run's name: it names the image, the run folder and the job."""
    model: ModelConfig = MISSING
    """The `model/` option."""
    parallelism: ParallelismConfig = MISSING
    """The `parallelism/` option."""
    hardware: HardwareConfig = MISSING
    """The `hardware/` option."""
    data: DataConfig = MISSING
    """The `data/` option."""
    image: ImageConfig = MISSING
    """The `image/` option."""
    target: Any = MISSING
    """One of the TargetConfig subclasses; the `target/` option picks which."""
    trainer: TrainerConfig = MISSING
    """The `trainer/` option."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """What `dockyard eval` evaluates the model with (lm-evaluation-harness); unused by the other verbs."""
    job: Job = Job.train
    """What the job does: train, or what `dockyard tokenize` (tokenize) and `dockyard eval` (evaluate) run."""
