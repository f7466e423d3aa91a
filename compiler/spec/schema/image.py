"""The `image/` group: how the container image is made."""

from dataclasses import dataclass, field
from enum import Enum

from compiler.spec.schema.missing import MISSING


class ImageFamily(Enum):
    cpu_local = "cpu_local"
    cuda = "cuda"
    dlc = "dlc"


DOCUMENT_PACKAGES = ("tokenizers", "datasets", "pyarrow", "zstandard")
"""What reading and tokenizing documents (`data.format=text|chat`) needs in the image, each pinned by its
`image.<name>` field and installed only for such plans."""
TRACKER_PINS = {"tensorboard": "tensorboard", "mlflow": "mlflow_skinny", "wandb": "wandb"}
"""`trainer.trackers` name → the `image.<field>` pinning the client it installs (the field names its package)."""


@dataclass
class ImageConfig:
    family: ImageFamily = ImageFamily.cpu_local
    """How the image is made: cpu_local (a local Debian base), cuda (a CUDA base) or dlc (an AWS DLC base)."""
    name: str = "dockyard/${name}"
    """Repository of the built image; the tag is the content hash."""
    base: str = MISSING
    """The image the build starts FROM (an OCI image reference)."""
    registry: str | None = None
    """Registry host (and port) the image is pushed to, like <account>.dkr.ecr.<region>.amazonaws.com."""
    push: bool = False
    """Push the built image to `registry` and pin the job to its digest (needed by remote targets)."""
    python_packages: list[str] = field(default_factory=list)
    """Pinned extra packages for the image (pip requirement lines)."""
    system_packages: list[str] = field(default_factory=list)
    """Extra apt packages for the system layer (cpu_local and cuda)."""
    torch: str | None = "2.13.0"
    """torch version: cpu_local installs its +cpu wheel from the wheelhouse, cuda the build for `cuda` from
    PyTorch's index; null on dlc, whose base brings its own."""
    deepspeed: str | None = "0.19.8"
    """DeepSpeed version (installed after torch, against it); null to leave it out."""
    boto3: str = "1.44.5"
    """boto3 version in the image (the runtime's S3 downloads)."""
    safetensors: str = "0.8.0"
    """safetensors version in the image (the final model's weights in Hugging Face format)."""
    huggingface_hub: str = "2.4.0"
    """huggingface_hub version in the image (writes the safetensors shards and their index)."""
    transformers: str = "5.24.0"
    """transformers version, installed when the plan trains a Hugging Face model (model=hf)."""
    peft: str = "0.21.2"
    """peft version, installed when the plan trains LoRA adapters (model.lora.rank > 0)."""
    bitsandbytes: str = "0.50.2"
    """bitsandbytes version, installed when the adapters train on a quantized base (model.lora.quantize_base):
    its NF4 and int8 kernels run on CPUs and GPUs."""
    tokenizers: str = "0.23.3"
    """tokenizers version, installed when the plan reads documents (`data.format=text|chat`)."""
    datasets: str = "5.2.0"
    """datasets version (save_to_disk folders), installed with tokenizers."""
    pyarrow: str = "25.0.1"
    """pyarrow version (Parquet), installed with tokenizers."""
    zstandard: str = "0.25.0"
    """zstandard version (.jsonl.zst), installed with tokenizers."""
    tensorboard: str = "2.21.0"
    """TensorBoard version, installed when `trainer.trackers` lists tensorboard (its event writer)."""
    mlflow_skinny: str = "3.17.2"
    """mlflow-skinny version (MLflow's client without the server), installed when `trainer.trackers` lists mlflow."""
    wandb: str = "0.31.0"
    """W&B's client version, installed when `trainer.trackers` lists wandb."""
    sagemaker_mlflow: str = "0.5.0"
    """The sagemaker-mlflow plugin's version, installed with mlflow-skinny when `trainer.mlflow.tracking_uri` is
    a SageMaker managed MLflow server's ARN (it resolves the ARN and signs the requests with SigV4)."""
    wheelhouse: list[str] = field(default_factory=list)
    """Folders searched for the torch wheel of cpu_local; empty means the find-links of pip's configuration."""
    cuda: str | None = None
    """cuda only: the base image's CUDA version (major.minor); it picks the NCCL and torch builds."""
    efa_installer: str | None = None
    """cuda only: the AWS EFA installer version (libfabric, the EFA provider, Open MPI)."""
    aws_ofi_nccl: str | None = None
    """cuda only: the aws-ofi-nccl plugin version that lets NCCL use EFA."""
    nccl: str | None = None
    """cuda only: the NCCL package version (apt, like 2.27.7-1)."""
    gdrcopy: str | None = None
    """cuda only: the GDRCopy user-space library version (the kernel module belongs to the host)."""
