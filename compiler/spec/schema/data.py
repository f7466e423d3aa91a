"""The `data/` group: where the training tokens come from."""

from dataclasses import dataclass, field
from enum import Enum


class DataSource(Enum):
    synthetic = "synthetic"
    local = "local"
    s3 = "s3"
    fsx = "fsx"
    efs = "efs"


class InputMode(Enum):
    File = "File"
    FastFile = "FastFile"


@dataclass
class DataConfig:
    source: DataSource = DataSource.synthetic
    """Where the token files come from: synthetic (generated), local, s3, fsx or efs."""
    path: str | None = None
    """local: a host folder of token files; fsx/efs: the directory inside the file system."""
    uri: str | None = None
    """s3: the prefix holding the token files (s3://bucket/prefix)."""
    channel: str = "train"
    """The SageMaker channel the data arrives in (/opt/ml/input/data/<channel>)."""
    groups: list[str] = field(default_factory=list)
    """With `hardware.groups`: the instance groups the channel reaches (all of them when empty)."""
    input_mode: InputMode = InputMode.File
    """s3: File (downloaded before training) or FastFile (streamed on read), as SageMaker names them."""
    file_system_id: str | None = None
    """fsx (fs-...) or efs (fs-...) file system id."""
    claim: str | None = None
    """fsx/efs on Kubernetes: the PersistentVolumeClaim that mounts the file system (`path` is inside it)."""
    token_dtype: str = "uint16"
    """Element type of the token files: uint16 (vocab < 65,536) or uint32."""
