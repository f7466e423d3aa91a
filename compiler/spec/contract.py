"""Where things are inside a training container: SageMaker's container contract, kept on every target so
the same image runs unchanged everywhere. The compiler's targets, the image renderer and the entrypoint
share these names."""

CONTAINER_ROOT = "/opt/ml"
PLAN_CHANNEL = "plan"
"""The plan reaches every node as an input channel of its own."""
PRETRAINED_CHANNEL = "pretrained"
"""`model=hf`: the channel holding the checkpoint (`model.path`) on the nodes, as SageMaker's input channels
are mounted, `/opt/ml/input/data/pretrained`."""
HUB_TOKEN = "HF_TOKEN"
"""The variable huggingface_hub reads a token from (`target.hub_token_secret` fills it)."""
SECRET_PREFIX = "DOCKYARD_SECRET_"
"""SageMaker: `DOCKYARD_SECRET_<NAME>=<Secrets Manager ARN>` in the job's environment for each entry of
`target.secrets`; the entrypoint reads the secret with the job's role and sets NAME."""
TOKENIZER_CHANNEL = "tokenizer"
"""A tokenizer folder on the host (`data.tokenizer`) reaches the local target's containers as this channel."""
PLAN_PATH = f"{CONTAINER_ROOT}/input/data/{PLAN_CHANNEL}/plan.json"
"""Where targets point DOCKYARD_PLAN."""
CODE_DIR = f"{CONTAINER_ROOT}/code"
"""Where the image puts `trainer.source_dir` (SageMaker's code folder) and where the entrypoint starts
`trainer.script` from: the code folder under the entrypoint's root, /opt/ml in every image."""
NODES_PER_HOST = "DOCKYARD_NODES_PER_HOST"
"""Set by a target whose nodes share one machine (the local target's containers): how many do. The entrypoint
sizes CPU training's threads per process by it (`entrypoint.launcher.threads`)."""


def node_count(value: object) -> int | None:
    """A `NODES_PER_HOST` value as a number: a whole number >= 1 in ASCII digits, else None (the planner refuses
    such a value in `target.environment`, and the entrypoint where it reaches a node anyway)."""
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and int(text) >= 1 else None


RUN_AS_USER = "dockyard"
"""The unprivileged user the image creates and the entrypoint drops to after preparing /opt/ml as root."""
RUN_AS = "DOCKYARD_RUN_AS"
"""`uid:gid` of the user who launched a run on this machine's containers (the local target, Slurm's docker
runtime): the entrypoint drops to it instead of `RUN_AS_USER`, so the run's files on the host are that user's."""

OUTPUT_DATA_DIR = f"{CONTAINER_ROOT}/output/data"
"""The job's output folder, where the trainer's metrics and trackers write (SageMaker uploads it at the end)."""
METRICS_FILE = "metrics.jsonl"
"""The trainer's metrics file in the job's output folder (`output/data/`), which the run reader charts."""
SAMPLES_FILE = "samples.jsonl"
"""The completions of `trainer.sample_prompts` in the job's output folder, one JSON object per prompt and
evaluation: `{"step": N, "prompt": ..., "completion": ...}`."""
CHECKPOINT_MARKER = "dockyard.json"
"""The file a checkpoint folder (`checkpoints/step-NNNNNNNN`) holds once it is complete: written last."""
RESTARTS_FILE = "restarts.jsonl"
"""One JSON line per in-job restart (`trainer.restarts`) in the job's output folder: the run's record counts them."""
TRACKERS = ("jsonl", "tensorboard", "mlflow", "wandb")
"""The names `trainer.trackers` may list: the trainer's `entrypoint.trainer.metrics.SINKS` (tested equal),
here so that the planner checks them without importing the runtime."""
ALWAYS_ON_TRACKER = "jsonl"
"""The tracker every run has, listed or not: the run reader, the sweep summary and SageMaker's metric regexes
read its lines."""
TENSORBOARD_DIR = "tensorboard"
"""The TensorBoard tracker's event files, in the job's output folder (`output/data/tensorboard`)."""
WANDB_DIR = "wandb"
"""The W&B tracker's run folders (what `wandb sync` uploads), in the job's output folder."""
TRACKER_CREDENTIALS = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "WANDB_API_KEY",
)
"""The trackers' credentials: a target passes them from the submitting shell's environment to the nodes
when it starts them, so that they never reach a plan, a request or an image."""
METRICS_SEPARATORS = (", ", ": ")
"""`json.dumps` separators of a metrics line, `{"step": 10, "loss": 2.5, ...}`: one JSON object per line
in the file and in the job's log, where SageMaker's metric regexes look for `"<name>": <number>`."""
REPORTED_METRICS = ("loss", "val_loss", "tokens_per_s", "grad_norm", "mfu")
"""Keys of the metrics lines that SageMaker extracts from the job's log: the console charts them, and
DescribeTrainingJob's FinalMetricDataList gives a sweep's summary their final values."""
MOE_AUX_LOSS = "moe_aux_loss"
"""A metrics line's mean router load-balancing loss of a mixture of experts (transformers' own, unscaled)."""
EXPERT_LOAD_IMBALANCE = "expert_load_imbalance"
"""A metrics line's busiest expert's tokens over the mean, in the worst MoE layer, over every rank's tokens."""

UNHEALTHY_FILE = "unhealthy-nodes"
"""In the job's output folder (`/opt/ml/output`): the name of each node that failed the health check, one a
line; Slurm's retry leaves those nodes out (`scontrol update ExcNodeList`)."""
TERMINATION_LOG = "/dev/termination-log"
"""Where Kubernetes reads a container's termination message (the pod spec's terminationMessagePath): the
entrypoint writes the failure's reason there too."""
MAX_ARG_STRLEN = 128 * 1024
"""Linux's limit on one `NAME=value` string of a process's environment (with its NUL): a longer one fails
the container's exec with E2BIG."""
EVAL_TASKS_DIR = "/opt/dockyard/eval_tasks"
"""Where an evaluation's image holds `eval.include_path` (the harness's task YAMLs and their data files): the
folder travels in the image, so the job reads it on every target; the harness runs there, so `data_files`
relative to it resolve."""
EVAL_ADAPTER_DIR = "/opt/dockyard/eval_adapter"
"""Where an evaluation's image holds `eval.adapter` (a PEFT adapter scored on its base, the model)."""
EVAL_DIR = "eval"
"""In the job's output folder (`output/data/eval`): the harness's results JSON and its samples."""
EVAL_METRIC_PREFIX = "eval/"
"""A task's score in a metrics line: `eval/<task>/<metric>` (the harness's `acc,none` is `acc`, another
filter than none stays in the name: `exact_match/strict-match`), its standard error `..._stderr` beside it."""
EVAL_STDERR_SUFFIX = "_stderr"
SYSTEM_FOLDERS = frozenset({"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys", "usr"})
"""The top folders of the image's system, where a folder mounted at its own path (a token cache, a dataset) would
overwrite or hide the system's files."""
