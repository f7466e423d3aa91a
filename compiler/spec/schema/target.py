"""The `target/` group: the options every target shares (`TargetConfig`) and each target's own
(`<Kind>TargetConfig`, beside its kind's name). The adapters that run plans on a target are in
`compiler.targets.<kind>`; these are only the typed options."""

from dataclasses import dataclass, field
from enum import Enum

from compiler.spec.contract import HUB_TOKEN
from compiler.spec.schema.missing import MISSING


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
class LocalTargetConfig(TargetConfig):
    kind: TargetKind = TargetKind.local
    """local: containers on this machine's Docker engine."""
    network: str = "dockyard-${name}"
    """Name of the Docker network the nodes share."""


@dataclass
class SageMakerTargetConfig(TargetConfig):
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
    hub_token_secret: str | None = None
    """model=hf with a gated Hub id: the ARN of a Secrets Manager secret holding a Hugging Face token, which
    the entrypoint reads with the job's role and hands to the trainer as HF_TOKEN (never in the request);
    the same as `secrets: {HF_TOKEN: <arn>}`."""
    secrets: dict[str, str] = field(default_factory=dict)
    """Environment variables the nodes get from Secrets Manager (tracker credentials: MLFLOW_TRACKING_TOKEN,
    MLFLOW_TRACKING_USERNAME/PASSWORD, WANDB_API_KEY): NAME → the secret's ARN, read by the entrypoint with
    the job's role (which needs secretsmanager:GetSecretValue on it). Only the ARN is in the request."""


class JobKind(Enum):
    jobset = "jobset"
    """JobSet (jobset.x-k8s.io/v1alpha2): one replicated job of `nodes` pods, restarted as a group."""
    pytorchjob = "pytorchjob"
    """Kubeflow's PyTorchJob (kubeflow.org/v1): a Master and `nodes - 1` Workers."""
    indexed_job = "indexed_job"
    """A plain Indexed Job and a headless Service, for clusters with neither operator."""


@dataclass
class KubernetesTargetConfig(TargetConfig):
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
    hub_token_secret: str | None = None
    """model=hf with a gated Hub id: a Secret in the namespace whose key HF_TOKEN the pods get as the
    environment variable HF_TOKEN (a secretKeyRef: the token never enters the manifest); the same as
    `secrets: {HF_TOKEN: <name>}`."""
    secrets: dict[str, str] = field(default_factory=dict)
    """Environment variables the pods get from Secrets in the namespace (tracker credentials:
    MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD, WANDB_API_KEY): NAME → `secret` (its key NAME)
    or `secret/key`, each a secretKeyRef, so no value enters the manifest."""


def secret_references(target: SageMakerTargetConfig | KubernetesTargetConfig) -> dict[str, str]:
    """The variables a target fills from secrets: `target.secrets`, and HF_TOKEN from `hub_token_secret`."""
    hub = {HUB_TOKEN: target.hub_token_secret} if target.hub_token_secret else {}
    return hub | target.secrets


class ContainerRuntime(Enum):
    pyxis = "pyxis"
    """NVIDIA's SPANK plugin: `srun --container-image`, enroot underneath (GPU clusters' usual choice)."""
    docker = "docker"
    """`docker run --network host --init` on each node, started by the srun task."""
    apptainer = "apptainer"
    """`apptainer exec docker://...` on each node."""


@dataclass
class SlurmTargetConfig(TargetConfig):
    kind: TargetKind = TargetKind.slurm
    """slurm: a batch job on a Slurm cluster."""
    partition: str | None = None
    """Slurm partition (--partition); null for the cluster's default."""
    account: str | None = None
    """Slurm account charged (--account); null for the user's default."""
    container_runtime: ContainerRuntime | None = None
    """How each node starts the image: pyxis for GPU plans and docker for CPU plans when unset."""
