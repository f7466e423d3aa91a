"""Slurm: a plan and its image as one sbatch script, one task per node, each starting one container.

`to_request` is pure: the plan, the image and the run folder in, a `SlurmRequest` out, whose text is the
script `sbatch` receives. The run folder is on the file system the cluster shares (the login node's
working directory, as Slurm users keep it): the plan, the model, the checkpoints (a requeued job resumes
from them) and the job's output file live there. Each node's container sees SageMaker's layout under
/opt/ml, and the entrypoint finds its rank and the master from Slurm's own variables.

Every value in the script is either quoted by the template (`q`, shlex.quote) or, where Slurm reads it
unquoted (`#SBATCH` lines, mount lists), checked against a full-match grammar first.
"""

import json
import math
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jinja2

from compiler.spec import DataSource, Plan
from compiler.spec.contract import RUN_AS, TRACKER_CREDENTIALS, UNHEALTHY_FILE
from compiler.spec.errors import ConfigError
from compiler.spec.schema import ContainerRuntime
from compiler.targets.channels import CheckpointSource, checkpoint_source, pretrained_channel
from compiler.targets.host_user import HostUser

CONTAINER_ROOT = "/opt/ml"
ENTRYPOINT = "dockyard-entrypoint"
"""The image's entrypoint; pyxis and apptainer run a command in the image rather than its ENTRYPOINT."""
EFA_DEVICES = "/dev/infiniband"

SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PARTITIONS = re.compile(rf"{SLURM_NAME.pattern}(?:,{SLURM_NAME.pattern})*")
"""`--partition` takes a comma-separated list: the job runs in whichever can start it first."""
"""Partitions and accounts: what `#SBATCH` lines can hold without quoting."""
FOLDER = re.compile(r"/[A-Za-z0-9._/+@=-]*")
"""Absolute paths that fit unquoted in `#SBATCH --output` and in `src:dst[:ro]` mount lists."""

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURMD_NODENAME", "SLURM_RESTART_COUNT", "MASTER_PORT")
"""What the entrypoint reads in a Slurm task (entrypoint.launcher.cluster.from_slurm), passed into docker containers;
pyxis and apptainer pass the task's whole environment."""


@dataclass(frozen=True)
class SlurmRequest:
    run_id: str
    run_dir: str
    image: str
    runtime: str
    script: str
    """The sbatch script, exactly as submitted."""
    host_folders: tuple[str, ...] = ()
    """Folders of the run the containers write to; created before submitting, writable for the image's user."""
    downloads: dict[str, str] = field(default_factory=dict)
    """S3 channels copied into the run folder before submitting: folder -> s3:// prefix."""

    def to_json(self) -> str:
        """Everything `submit` uses, the script included (what the run folder keeps besides job.sbatch)."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def __str__(self) -> str:
        """The script: what `sbatch` receives and `launch --dry-run` prints."""
        return self.script


def runtime(plan: Plan) -> ContainerRuntime:
    """The configured runtime, else pyxis where there are GPUs and docker on CPU partitions."""
    chosen = plan.target.container_runtime
    if chosen is not None:
        return chosen
    return ContainerRuntime.pyxis if plan.instance.has_gpus else ContainerRuntime.docker


def runtime_image(kind: ContainerRuntime, reference: str) -> str:
    """The image as each runtime names it: enroot writes a registry as `registry#repository`, apptainer
    takes a `docker://` URI."""
    if kind is ContainerRuntime.apptainer:
        return f"docker://{reference}"
    if kind is ContainerRuntime.pyxis:
        first, slash, rest = reference.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            return f"{first}#{rest}"
    return reference


MAX_TIME_MINUTES = 35_791_393
"""The longest `--time` Slurm keeps as given (24855-03:13:00): it holds the limit as seconds in a signed 32-bit
integer, and a minute more wraps it, silently, to another limit or to UNLIMITED (measured with Slurm 22.05's
sbatch and scontrol)."""


def time_limit(hours: float) -> str:
    """`--time` as days-hours:minutes:seconds, rounded up to the minute."""
    total = math.ceil(hours * 60)
    if total > MAX_TIME_MINUTES:
        raise ConfigError(
            "target.max_run_hours",
            f"{hours:.10g} hours is past the longest time limit Slurm keeps, "
            f"24855-03:13:00 ({MAX_TIME_MINUTES / 60:,.2f} hours)",
            "ask for fewer hours",
        )
    days, minutes = divmod(total, 24 * 60)
    return f"{days}-{minutes // 60:02d}:{minutes % 60:02d}:00"


def _checked(pattern: re.Pattern, value: str, key: str, what: str) -> str:
    if not pattern.fullmatch(value):
        raise ConfigError(key, f"{what} '{value}' cannot go into an sbatch script", f"use {pattern.pattern}")
    return value


def check_names(plan: Plan) -> None:
    """The partition and account as sbatch takes them (checked when planning, and again in the request)."""
    for key, value, pattern in (
        ("target.partition", plan.target.partition, PARTITIONS),
        ("target.account", plan.target.account, SLURM_NAME),
    ):
        if value is not None:
            _checked(pattern, value, key, "the name")


def efa_devices(kind: ContainerRuntime) -> list[str]:
    """The host's EFA devices as each runtime takes them: docker with --device, pyxis as a mount; apptainer
    shares the host's /dev already."""
    if kind is ContainerRuntime.docker:
        return [EFA_DEVICES]
    if kind is ContainerRuntime.pyxis:
        return [f"{EFA_DEVICES}:{EFA_DEVICES}"]
    return []


def channels(plan: Plan, run_dir: Path) -> dict[str, str]:
    """Channel name -> folder on the shared file system: the plan, a pretrained checkpoint (a folder there,
    or copied from S3 into the run), and the data unless it is synthetic."""
    found = {"plan": str(run_dir / "plan")}
    for name, folder in pretrained_channel(plan, run_dir)[0].items():
        found[name] = _checked(FOLDER, folder, "model.path", "the folder")
    if plan.data.source is not DataSource.synthetic:
        _checked(SLURM_NAME, plan.data.channel, "data.channel", "the channel name")
    if plan.data.source is DataSource.local:
        found[plan.data.channel] = _checked(FOLDER, str(Path(plan.data.path)), "data.path", "the folder")
    elif plan.data.source is DataSource.s3:
        found[plan.data.channel] = str(run_dir / "data" / plan.data.channel)  # downloaded by submit()
    return found


def to_request(plan: Plan, image: str, *, run_id: str, run_dir: Path, runs_as: HostUser | None = None) -> SlurmRequest:
    """The sbatch script that runs `plan` from `image`; `run_dir` is an absolute folder on shared storage.
    Docker starts the image as root, so its entrypoint is told to drop to `runs_as`, the submitting user
    (`compiler.targets.host_user`); pyxis and apptainer start it as that user already."""
    target = plan.target
    folder = _checked(FOLDER, str(run_dir), "hydra.run.dir", "the run folder")
    check_names(plan)
    kind = runtime(plan)
    sources = channels(plan, run_dir)
    writable = {name: str(run_dir / name) for name in ("model", "checkpoints", "output")}
    mounts = [f"{source}:{CONTAINER_ROOT}/input/data/{name}:ro" for name, source in sources.items()]
    mounts += [f"{source}:{CONTAINER_ROOT}/{name}" for name, source in writable.items()]
    environment = dict(target.environment)
    if kind is ContainerRuntime.docker and runs_as is not None:
        environment[RUN_AS] = str(runs_as)
    # A Hub checkpoint's token and the trackers' credentials go from the submitting shell into the containers
    # by name, never by value.
    hub = ("HF_TOKEN",) if checkpoint_source(plan) is CheckpointSource.hub else ()
    credentials = TRACKER_CREDENTIALS if {"mlflow", "wandb"} & set(plan.trainer.trackers) else ()
    names = ("DOCKYARD_PLAN", "DOCKYARD_RUN_ID", *SLURM_VARIABLES, *environment, *hub, *credentials)
    passed = tuple(dict.fromkeys(names))
    values = {
        "run_id": run_id,
        "run_dir": folder,
        "runtime": kind.value,
        "nodes": plan.layout.nodes,
        "gpus_per_node": plan.instance.gpus,
        "partition": target.partition,
        "account": target.account,
        "time_limit": time_limit(target.max_run_hours),
        "max_retries": target.max_retries,
        "unhealthy": str(run_dir / "output" / UNHEALTHY_FILE),
        "plan_path": f"{CONTAINER_ROOT}/input/data/plan/plan.json",
        "environment": environment,
        "container_environment": passed,
        "image": runtime_image(kind, image),
        "entrypoint": ENTRYPOINT,
        "mounts": mounts,
        "devices": efa_devices(kind) if plan.instance.efa_devices else [],
    }
    downloads = {sources[plan.data.channel]: plan.data.uri} if plan.data.source is DataSource.s3 else {}
    downloads |= pretrained_channel(plan, run_dir)[1]
    return SlurmRequest(
        run_id=run_id,
        run_dir=folder,
        image=image,
        runtime=kind.value,
        script=_template().render(values),
        host_folders=tuple(writable.values()),
        downloads=downloads,
    )


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env.get_template("sbatch.sh.j2")
