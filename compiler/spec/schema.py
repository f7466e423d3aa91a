"""Typed schemas of every config group, and so of the Plan's sections.

YAML files in `conf/` extend these dataclasses (see `compiler.config.store`), so a misspelled key or a
value of the wrong type is rejected while Hydra composes the config, before any of dockyard's own
checks run. Cross-field rules live in `compiler.planner`, not here. Standard library only: the image
ships this module, and the entrypoint reads the plan through it.
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MISSING: Any = "???"
"""omegaconf's marker for a mandatory value (`omegaconf.MISSING` is this string), spelled out so that the
runtime does not import omegaconf."""


class Activation(Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Norm(Enum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Position(Enum):
    learned = "learned"
    rope = "rope"


@dataclass
class ModelConfig:
    name: str = MISSING
    """The model's name in summaries and image labels (the `model/` option's name)."""
    layers: int = MISSING
    """Transformer blocks."""
    hidden: int = MISSING
    """Width of the residual stream (d_model)."""
    heads: int = MISSING
    """Attention heads (query heads under grouped-query attention); they divide `hidden`."""
    kv_heads: int = MISSING
    """Key/value heads; fewer than `heads` is grouped-query attention."""
    ffn_hidden: int = MISSING
    """Width of the MLP's inner layer (per gate under SwiGLU)."""
    vocab: int = MISSING
    """Token vocabulary; the embedding and the output head have this many rows."""
    context: int = MISSING
    """The longest sequence the model supports (learned positions or the RoPE length it was trained at)."""
    seq_len: int = MISSING
    """The sequence length trained at; at most `context`."""
    activation: Activation = Activation.gelu
    """The MLP's activation: gelu (GPT-2) or swiglu (Llama)."""
    norm: Norm = Norm.layernorm
    """layernorm (GPT-2) or rmsnorm (Llama)."""
    position: Position = Position.learned
    """learned position embeddings (GPT-2) or rotary embeddings (rope, Llama)."""
    rope_theta: float = 10000.0
    """RoPE's base frequency (position=rope only)."""
    tied_embeddings: bool = True
    """The output projection shares the token embedding's weights."""
    bias: bool = True
    """Linear and norm layers carry biases (GPT-2 style); Llama-style models have none."""


class Strategy(Enum):
    ddp = "ddp"
    fsdp = "fsdp"
    """PyTorch FSDP, parameters, gradients and optimizer state sharded over all data-parallel ranks."""
    fsdp_hybrid = "fsdp_hybrid"
    """FSDP sharded within groups of `shard_group_size` ranks and replicated across groups."""
    zero1 = "zero1"
    zero2 = "zero2"
    zero3 = "zero3"
    smddp = "smddp"
    """SageMaker's distributed data-parallel library (AllReduce over EFA), SageMaker only."""

    @property
    def is_deepspeed(self) -> bool:
        return self in (Strategy.zero1, Strategy.zero2, Strategy.zero3)

    @property
    def shards_parameters(self) -> bool:
        return self in (Strategy.fsdp, Strategy.fsdp_hybrid, Strategy.zero3)


class Checkpointing(Enum):
    none = "none"
    selective = "selective"
    """Recompute only the attention core (Korthikanti et al. 2022)."""
    full = "full"


class Precision(Enum):
    auto = "auto"
    """bf16 on GPUs, fp32 on CPUs."""
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Offload(Enum):
    none = "none"
    optimizer = "optimizer"
    """Optimizer state (and step) on the host: ZeRO and FSDP strategies."""
    parameters = "parameters"
    """Parameters and optimizer state on the host: ZeRO-3 and FSDP only."""


@dataclass
class ParallelismConfig:
    strategy: Strategy = Strategy.ddp
    """How data-parallel ranks hold and update the model: ddp, fsdp, fsdp_hybrid, zero1-3 or smddp."""
    dp: int = -1
    """Data-parallel degree; -1 infers it from the world size."""
    tp: int = 1
    """Tensor-parallel degree; -1 infers it. Must stay inside one node."""
    pp: int = 1
    """Pipeline-parallel degree; -1 infers it."""
    pp_schedule: str = "1f1b"
    """gpipe | 1f1b | interleaved-1f1b | zero-bubble (the interleaved ones run two stages per rank)."""
    pp_microbatches: int = -1
    """Micro batches a pipeline step runs (grad_accum, when pp > 1); -1: enough for a bubble under 20%."""
    pp_layers_per_stage: list[int] = field(default_factory=list)
    """Decoder layers of each pipeline stage; empty: an even split, the remainder to the middle stages."""
    shard_group_size: int = -1
    """fsdp_hybrid only: ranks per shard group; -1 means the data-parallel ranks of one node."""
    micro_batch: Any = 1
    """Sequences per data-parallel rank per forward pass, or `auto`: the largest that fits GPU memory."""
    grad_accum: int = -1
    """Micro batches per optimizer step; -1 infers it from `global_batch` (or 1)."""
    global_batch: int = -1
    """Sequences per optimizer step over all replicas; -1 derives micro_batch × grad_accum × dp."""
    activation_checkpointing: Checkpointing = Checkpointing.none
    """Recompute activations in the backward: none, selective (the attention core) or full."""
    mixed_precision: Precision = Precision.auto
    """Compute precision: auto (bf16 on GPUs, fp32 on CPUs), bf16, fp16 (with loss scaling) or fp32."""
    offload: Offload = Offload.none
    """Model state kept in host memory: none, optimizer, or parameters (sharded strategies only)."""
    activation_offload: bool = False
    """Move each block's saved activations to pinned host memory after its forward and prefetch them for
    its backward (ddp, fsdp, fsdp_hybrid, smddp)."""
    activation_offload_horizon: int = 2
    """With activation_offload: blocks fetched back ahead of the one whose backward runs."""
    smddp_fallback: bool = False
    """If smddp does not import in the container, warn and use NCCL instead of failing."""


@dataclass
class InstanceGroup:
    """A group of a heterogeneous cluster that does not train (a CPU group that prepares data)."""

    instance_type: str = MISSING
    """A catalog type, as for `hardware.instance_type`."""
    count: int = 1
    """Instances in the group."""


@dataclass
class HardwareConfig:
    instance_type: str = MISSING
    """An instance type of `compiler/planner/catalog.py` (p5.48xlarge, ...), or `cpu` for CPU-only nodes."""
    nodes: int = 1
    """Instances (nodes) the job runs on."""
    processes_per_node: int = -1
    """-1 means one process per GPU; on `cpu` it must be set."""
    price_per_hour: float | None = None
    """Overrides the catalog's on-demand price (a discount, another region)."""
    memory_check: bool = True
    """Refuse a plan whose predicted peak exceeds GPU memory; false makes that a warning."""
    groups: dict[str, InstanceGroup] = field(default_factory=dict)
    """Further instance groups (a heterogeneous cluster): each runs `trainer.group_commands.<name>`, and
    only the training group (`instance_type` × `nodes`, named `train_group`) trains."""
    train_group: str = "train"
    """The training group's name where `groups` is set."""


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


class ImageFamily(Enum):
    cpu_local = "cpu_local"
    cuda = "cuda"
    dlc = "dlc"


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


class TargetKind(Enum):
    local = "local"
    sagemaker = "sagemaker"
    kubernetes = "kubernetes"
    slurm = "slurm"


@dataclass
class TargetConfig:
    kind: TargetKind = MISSING
    """Where the plan runs; set by the `target/` option."""
    max_retries: int = 0
    """Times a failed job is restarted (resuming from its checkpoints)."""
    max_run_hours: float = 24.0
    """Wall-clock limit of the job; the target stops it after this long."""
    environment: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every node (not for secrets: plans are stored and shared)."""


@dataclass
class LocalTarget(TargetConfig):
    kind: TargetKind = TargetKind.local
    """local: containers on this machine's Docker engine."""
    network: str = "dockyard-${name}"
    """Name of the Docker network the nodes share."""


@dataclass
class SageMakerTarget(TargetConfig):
    kind: TargetKind = TargetKind.sagemaker
    """sagemaker: a SageMaker training job."""
    region: str = "us-east-1"
    """AWS region of the training job."""
    role_arn: str | None = None
    """Execution role; needed to launch, not to plan."""
    output_uri: str | None = None
    """s3:// prefix for the job's plan, output and (by default) checkpoints."""
    checkpoint_uri: str | None = None
    """s3:// prefix SageMaker syncs /opt/ml/checkpoints with; default: under `output_uri`."""
    volume_size_gb: int = 100
    """EBS volume per instance, for File-mode channels and local files."""
    spot: bool = False
    """Managed spot training (needs `max_wait_hours` >= `max_run_hours`)."""
    max_wait_hours: float | None = None
    """Spot only: how long to wait for capacity and run, in all."""
    keep_alive_seconds: int = 0
    """Warm pool: seconds the instances stay up after the job for the next one (0 = none)."""
    network_isolation: bool = False
    """No network access from the containers (S3 channels still arrive)."""
    inter_container_encryption: bool = False
    """Encrypt traffic between the job's instances (slower collectives)."""
    subnets: list[str] = field(default_factory=list)
    """VPC subnet ids for the job (needed for FSx and EFS channels)."""
    security_groups: list[str] = field(default_factory=list)
    """VPC security group ids, with `subnets`."""


class JobKind(Enum):
    jobset = "jobset"
    """JobSet (jobset.x-k8s.io/v1alpha2): one replicated job of `nodes` pods, restarted as a group."""
    pytorchjob = "pytorchjob"
    """Kubeflow's PyTorchJob (kubeflow.org/v1): a Master and `nodes - 1` Workers."""
    indexed_job = "indexed_job"
    """A plain Indexed Job and a headless Service, for clusters with neither operator."""


@dataclass
class KubernetesTarget(TargetConfig):
    kind: TargetKind = TargetKind.kubernetes
    """kubernetes: a job on a Kubernetes cluster."""
    kind_of_job: JobKind = JobKind.jobset
    """What the job is made of: jobset, pytorchjob or indexed_job (see JobKind)."""
    namespace: str = "default"
    """Namespace the job's objects are created in."""
    service_account: str | None = None
    """Service account the pods run as (for IAM roles for service accounts: the role that reads S3 data);
    null for the default."""
    image_pull_secrets: list[str] = field(default_factory=list)
    """Secrets the nodes pull the image with (none on EKS with ECR, where the nodes' role pulls)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Added to the job and its pods."""
    annotations: dict[str, str] = field(default_factory=dict)
    """Added to the job and its pods."""
    queue: str | None = None
    """Kueue's LocalQueue: the job is labelled kueue.x-k8s.io/queue-name and waits there for quota."""
    scheduler_name: str | None = None
    """A scheduler other than the cluster's default (a gang scheduler); null for the default."""
    priority_class: str | None = None
    """The pods' PriorityClass; null for the cluster's default."""
    claim: str | None = None
    """A ReadWriteMany PersistentVolumeClaim (FSx for Lustre, EFS) keeping each run's checkpoints and model
    under `<run id>/`; without one they live in the pods and go with them."""


class ContainerRuntime(Enum):
    pyxis = "pyxis"
    """NVIDIA's SPANK plugin: `srun --container-image`, enroot underneath (GPU clusters' usual choice)."""
    docker = "docker"
    """`docker run --network host --init` on each node, started by the srun task."""
    apptainer = "apptainer"
    """`apptainer exec docker://...` on each node."""


@dataclass
class SlurmTarget(TargetConfig):
    kind: TargetKind = TargetKind.slurm
    """slurm: a batch job on a Slurm cluster."""
    partition: str | None = None
    """Slurm partition (--partition); null for the cluster's default."""
    account: str | None = None
    """Slurm account charged (--account); null for the user's default."""
    container_runtime: ContainerRuntime | None = None
    """How each node starts the image: pyxis for GPU plans and docker for CPU plans when unset."""


class Entry(Enum):
    builtin = "builtin"
    script = "script"


class Launcher(Enum):
    torchrun = "torchrun"
    """One process per GPU (or CPU slot) under torchrun, as SageMaker's `torch_distributed` starts a script."""
    per_node = "per_node"
    """One process per node that starts its own workers, as SageMaker's plain estimator starts a script."""


class LrSchedule(Enum):
    cosine = "cosine"
    linear = "linear"
    constant = "constant"


class Compile(Enum):
    """What `torch.compile` compiles. `false` keeps YAML's boolean as its value, so `trainer.compile=false`
    reads as written."""

    false = False
    blocks = "blocks"
    model = "model"


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes (`trainer.compile_mode`)."""


class LrScaling(Enum):
    none = "none"
    linear = "linear"
    sqrt = "sqrt"


@dataclass
class TrainerConfig:
    entry: Entry = Entry.builtin
    """builtin (dockyard's trainer) or script (your own, from `source_dir`)."""
    steps: int = 100
    """Optimizer steps to train."""
    lr: float = 3e-4
    """Peak learning rate (AdamW), at the global batch `base_batch` when `lr_scaling` is set."""
    lr_scaling: LrScaling = LrScaling.none
    """How the peak learning rate follows the global batch: none, linear (× batch/base_batch) or sqrt
    (× its square root), so a sweep over the batch keeps one recipe."""
    base_batch: int | None = None
    """The global batch, in sequences, that `lr` was tuned at (needed by `lr_scaling`)."""
    min_lr_ratio: float = 0.1
    """The final learning rate of a decaying schedule, as a fraction of `lr`."""
    lr_schedule: LrSchedule = LrSchedule.cosine
    """How the learning rate moves after warmup: cosine, linear or constant."""
    warmup_steps: int = 0
    """Steps of linear warmup from 0 to `lr`."""
    weight_decay: float = 0.1
    """AdamW's decoupled weight decay (not applied to norms and biases)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 turns clipping off."""
    checkpoint_interval: int = 0
    """Steps between checkpoints; 0 keeps only the final model."""
    log_interval: int = 10
    """Steps between metrics lines."""
    seed: int = 1234
    """Seed of the model's initialisation and the synthetic data."""
    compile: Any = False
    """torch.compile: false, blocks (each transformer block) or model (the whole model); the planner resolves
    it to a `Compile`'s value (YAML reads `false` as a boolean, which an enum field would refuse)."""
    compile_mode: str = "default"
    """torch.compile's mode: default, reduce-overhead, max-autotune or max-autotune-no-cudagraphs."""
    source_dir: str | None = None
    """entry=script: the folder with the user's code, baked into the image's last layer."""
    script: str | None = None
    """entry=script: the file to start, relative to `source_dir`."""
    launcher: Launcher = Launcher.torchrun
    """entry=script: torchrun (a process per GPU) or per_node (one process per node, managing its workers)."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    """entry=script: passed to the script as --key value arguments."""
    group_commands: dict[str, str] = field(default_factory=dict)
    """The command each group of `hardware.groups` runs (split like a shell line, run without a shell)."""


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
