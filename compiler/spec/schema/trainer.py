"""The `trainer/` group: the built-in trainer's recipe, or the user's script."""

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SAGEMAKER_MLFLOW_ARN = re.compile(
    r"arn:aws(-us-gov)?:sagemaker:[a-z0-9-]+:[0-9]{12}:mlflow-tracking-server/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,255}"
)
"""A SageMaker managed MLflow tracking server's ARN (botocore's TrackingServerArn and TrackingServerName
patterns, in the partitions the sagemaker-mlflow plugin signs for); ASCII only, one line (fullmatch)."""


class Entry(Enum):
    builtin = "builtin"
    script = "script"


class Launcher(Enum):
    torchrun = "torchrun"
    """One process per GPU (or CPU slot) under torchrun, as SageMaker's `torch_distributed` starts a script."""
    per_node = "per_node"
    """One process per node that starts its own workers, as SageMaker's plain estimator starts a script."""


class LrSchedule(Enum):
    """How the learning rate moves over the run. Every name but cosine_to_min is the schedule of that name in
    transformers' `get_scheduler`, point by point (as the Trainer steps it: step 0's warm-up rate is 0)."""

    linear = "linear"
    """Warm-up from 0, then straight down to 0 at the last step's end."""
    cosine = "cosine"
    """Warm-up from 0, then half a cosine down to 0 at the last step's end."""
    cosine_with_min_lr = "cosine_with_min_lr"
    """As cosine, down to lr × min_lr_ratio instead of 0."""
    constant = "constant"
    """`lr` from the first step, without warm-up."""
    constant_with_warmup = "constant_with_warmup"
    """Warm-up from 0, then `lr`."""
    wsd = "wsd"
    """Warm-up, stable, decay (transformers' warmup_stable_decay): warm-up from lr × min_lr_ratio, `lr` until
    the last `decay_steps` steps, then a cosine down to lr × min_lr_ratio."""
    cosine_to_min = "cosine_to_min"
    """dockyard's pre-training schedule: a warm-up that reaches `lr` on its own last step, then a cosine down to
    lr × min_lr_ratio, reached on the run's last step."""


class Compile(Enum):
    """What `torch.compile` compiles. `false` keeps YAML's boolean as its value, so `trainer.compile=false`
    reads as written."""

    false = False
    blocks = "blocks"
    model = "model"


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes (`trainer.compile_mode`)."""


class WandbMode(Enum):
    offline = "offline"
    """Runs written under the output folder's `wandb/`, for `wandb sync` to upload later."""
    online = "online"
    """Streamed to W&B as the run goes (WANDB_API_KEY from the target's environment passing)."""


@dataclass
class MlflowConfig:
    tracking_uri: str | None = None
    """The MLflow tracking server: http(s)://host:port, or a SageMaker managed MLflow tracking server's ARN
    (arn:aws:sagemaker:REGION:ACCOUNT:mlflow-tracking-server/NAME). A server on the host's loopback is
    reached from local-target containers through the host."""
    experiment: str = "dockyard"
    """The MLflow experiment the run is logged under (created when missing)."""
    run_name: str | None = None
    """The MLflow run's name; the run id when unset."""


def sagemaker_mlflow(uri: str | None) -> bool:
    """Whether `uri` is a SageMaker managed MLflow server, reached through the sagemaker-mlflow plugin (the
    image installs it; every request is SigV4-signed with the node's AWS credentials)."""
    return uri is not None and SAGEMAKER_MLFLOW_ARN.fullmatch(uri) is not None


@dataclass
class WandbConfig:
    project: str = "dockyard"
    """The W&B project."""
    mode: WandbMode = WandbMode.offline
    """offline (a run folder `wandb sync` uploads) or online."""


class Objective(Enum):
    sft = "sft"
    """Supervised fine-tuning (and pre-training): the next-token loss on the target tokens."""
    dpo = "dpo"
    """Direct Preference Optimization on chosen/rejected pairs (`data.format=preference`), against a frozen
    reference model (`trainer.dpo`)."""


class DpoLoss(Enum):
    """The preference losses, each as TRL's DPOTrainer computes it (its `loss_type` of the same name)."""

    sigmoid = "sigmoid"
    """The DPO paper's: -log σ(β·Δ), Δ the chosen's minus the rejected's log-ratio to the reference."""
    ipo = "ipo"
    """IPO's squared loss (Δ averaged per completion token − 1/(2β))², β being the paper's τ."""
    hinge = "hinge"
    """SLiC's hinge: max(0, 1 − β·Δ)."""
    robust = "robust"
    """Robust DPO: the sigmoid loss unbiased for labels flipped with probability `label_smoothing`."""


@dataclass
class DpoConfig:
    beta: float = 0.1
    """How far the policy may move from the reference model: a higher β keeps it closer."""
    loss: DpoLoss = DpoLoss.sigmoid
    """sigmoid, ipo, hinge or robust."""
    label_smoothing: float = 0.0
    """loss=robust: the probability that a pair's preference is flipped, in [0, 0.5)."""
    precompute_reference: bool = False
    """Compute the reference model's log-probabilities of every pair in one pass before training, then free
    the reference model (less memory and compute per step)."""


class LrScaling(Enum):
    none = "none"
    linear = "linear"
    sqrt = "sqrt"


@dataclass
class TrainerConfig:
    entry: Entry = Entry.builtin
    """builtin (dockyard's trainer) or script (your own, from `source_dir`)."""
    objective: Objective = Objective.sft
    """sft (the next-token loss) or dpo (preference pairs, `trainer.dpo`)."""
    dpo: DpoConfig = field(default_factory=DpoConfig)
    """objective=dpo: the loss, β and the reference model."""
    steps: int = 100
    """Optimizer steps to train (replaced by the steps `epochs` makes, when set)."""
    epochs: float | None = None
    """Passes over the training data, instead of `steps`: the plan sets steps to ceil(epochs × the data's
    tokens / tokens per step), counting the tokens of `data.tokens` or of an earlier run's token cache."""
    loss_chunk: int = 1024
    """Tokens per chunk of the streamed loss: the output projection and the cross-entropy (or DPO's
    log-probabilities) run over this many tokens at a time, each chunk recomputed in the backward pass, so the
    logits of one chunk exist at once instead of tokens × vocabulary. 0 computes the whole logits (the plain
    loss; also what pipeline parallelism's last stage does)."""
    lr: float = 3e-4
    """Peak learning rate (AdamW), at the global batch `base_batch` when `lr_scaling` is set."""
    lr_scaling: LrScaling = LrScaling.none
    """How the peak learning rate follows the global batch: none, linear (× batch/base_batch) or sqrt
    (× its square root), so a sweep over the batch keeps one recipe."""
    base_batch: int | None = None
    """The global batch, in sequences, that `lr` was tuned at (needed by `lr_scaling`)."""
    min_lr_ratio: float | None = None
    """The final learning rate of cosine_with_min_lr, wsd and cosine_to_min, as a fraction of `lr`; unset, the
    plan records 0.1. A floor above 0 with a schedule that has none (linear, cosine, the constants) is refused."""
    lr_schedule: LrSchedule = LrSchedule.cosine_to_min
    """How the learning rate moves (`LrSchedule`): linear, cosine, cosine_with_min_lr, constant,
    constant_with_warmup, wsd (transformers' curves) or cosine_to_min."""
    warmup_steps: int = 0
    """Steps of linear warm-up to `lr`; may last the whole run."""
    warmup_ratio: float = 0.0
    """Warm-up as a fraction of the steps, instead of `warmup_steps`: ceil(warmup_ratio × steps) steps."""
    decay_steps: int = 0
    """lr_schedule=wsd: the last steps, over which the learning rate decays."""
    weight_decay: float = 0.1
    """AdamW's decoupled weight decay (not applied to norms and biases)."""
    adam_beta1: float = 0.9
    """AdamW's decay rate of the gradients' running mean."""
    adam_beta2: float = 0.95
    """AdamW's decay rate of the squared gradients' running mean (the HF Trainer's default is 0.999)."""
    adam_epsilon: float = 1e-8
    """AdamW's term added to the denominator."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 turns clipping off."""
    checkpoint_interval: int = 0
    """Steps between checkpoints; 0 keeps only the final model."""
    checkpoint_minutes: float = 0
    """Minutes between checkpoints, instead of `checkpoint_interval` (rank 0's clock decides, for every rank);
    0 leaves it to `checkpoint_interval`."""
    checkpoint_async: bool = False
    """Write checkpoints in the background (torch.distributed.checkpoint's async save): the state is copied
    to host memory, training goes on, and the checkpoint counts once its write has finished."""
    restarts: int = 0
    """Times torchrun restarts the workers on the same nodes when a rank dies, each resuming from the newest
    checkpoint, before the job fails (and the target's retry takes over)."""
    log_interval: int = 10
    """Steps between metrics lines."""
    eval_interval: int = 0
    """Steps between validation losses (needs `data.validation`); 0 evaluates only at the end."""
    eval_batches: int = 4
    """Micro batches per data-parallel rank in each validation."""
    early_stopping_patience: int = 0
    """Stop, keeping the model as it stands, once this many validations in a row find no lower loss than the best
    before them (the Trainer's `EarlyStoppingCallback`, axolotl's `early_stopping_patience`); 0 never stops early."""
    eval_tasks: list[str] = field(default_factory=list)
    """lm-evaluation-harness tasks scored on the model as it stands at the end of training (and every
    `eval_tasks_interval` steps), as `dockyard eval` scores them: the harness's options (`eval.include_path`,
    `eval.limit`, ...) come from the `eval` section; the scores go to metrics.jsonl and the trackers."""
    eval_tasks_interval: int = 0
    """Steps between task evaluations (`eval_tasks`); 0 evaluates only at the end."""
    sample_prompts: Any = field(default_factory=list)
    """Prompts the model completes at each evaluation (every `eval_interval` or `eval_tasks_interval` steps, and
    after the last step), greedily, through the model's chat template when the data is chat or preference:
    a list of texts, or a number N, the first N records' prompts of the held-out file (`data.validation` a path
    or a split); a list or a number, so typed Any. The completions go to the log, samples.jsonl and the
    trackers."""
    sample_max_new_tokens: int = 32
    """The most tokens generated for each of `sample_prompts`."""
    trackers: list[str] = field(default_factory=lambda: ["jsonl"])
    """Where the built-in trainer's metrics go (`compiler.spec.contract.TRACKERS`); jsonl, one JSON object per
    line to the job's log and to output/data/metrics.jsonl, is always on. tensorboard (event files in
    output/data/tensorboard), mlflow (`trainer.mlflow`), wandb (`trainer.wandb`)."""
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    """The MLflow tracker's server, experiment and run name (`trainer.trackers` lists mlflow)."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """The W&B tracker's project and mode (`trainer.trackers` lists wandb)."""
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
    health_check: bool = True
    """Before the first step, every node checks its GPUs, EFA devices and free space, then all ranks time one
    all-reduce against the bandwidth the instance type should reach; a failing node ends the job with one line
    naming it (built-in trainer)."""
    health_check_s: float = 120.0
    """The health check's time budget in seconds; a check still running then fails the node."""
    health_bandwidth_gbps: float | None = None
    """The all-reduce bus bandwidth (Gbit/s) the health check expects; unset takes the catalog's link of the
    instance type (between nodes its network, within one node its GPU link; none for CPU types). Below half
    of it warns, below a tenth fails."""
    straggler_every: int = 10
    """Steps between the ranks' comparisons of their compute times (their blocks' forward passes); 0 turns
    straggler detection off."""
    straggler_factor: float = 1.5
    """A rank whose compute time is this many times the median of all ranks' is slow."""
    straggler_windows: int = 3
    """Consecutive slow comparisons after which a rank is named a straggler."""
