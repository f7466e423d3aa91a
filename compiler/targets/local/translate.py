"""The local target: one container per node on a Docker network, each given SageMaker's training contract.

`to_request` is pure: the plan, the image and the run's folder in, a `LocalRequest` out, which renders
itself as JSON (what `--dry-run` prints and golden files hold). Containers are named `algo-1..N`, as in
SageMaker, and see exactly what a SageMaker training container sees: the contract files under
/opt/ml/input/config, every channel read-only under /opt/ml/input/data/<channel>, and /opt/ml/model,
/opt/ml/output and /opt/ml/checkpoints, which are folders of the run on the host. The plan itself
arrives as the `plan` channel, so the same image runs unchanged here and on SageMaker.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compiler.spec import DataSource, Entry, Plan
from compiler.spec.contract import CONTAINER_ROOT, PLAN_CHANNEL, PLAN_PATH

GROUP = "homogeneousCluster"
INSTANCE_TYPE = "local"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    hostname: str
    image: str
    command: tuple[str, ...]
    environment: dict[str, str]
    mounts: tuple[Mount, ...]
    contract_files: dict[str, str]
    """Files written on the host under the node's config folder before it starts (name -> text)."""
    gpus: bool


@dataclass(frozen=True)
class LocalRequest:
    run_id: str
    run_dir: str
    network: str
    max_retries: int
    containers: tuple[ContainerSpec, ...]
    host_folders: tuple[str, ...] = field(default=())
    """Folders of the run the containers write to; the entrypoint hands them to its user (or checks them)."""
    downloads: dict[str, str] = field(default_factory=dict)
    """S3 channels copied into the run before the containers start: host folder -> s3:// prefix."""

    @property
    def image(self) -> str:
        return self.containers[0].image

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def __str__(self) -> str:
        return self.to_json()


def hosts(plan: Plan) -> tuple[str, ...]:
    return tuple(f"algo-{i + 1}" for i in range(plan.layout.nodes))


def channel_sources(plan: Plan, run_dir: Path) -> dict[str, str]:
    """Host folders mounted as channels: the plan, and the data unless it is synthetic."""
    channels = {PLAN_CHANNEL: str(run_dir / "plan")}
    if plan.data.source is DataSource.local:
        channels[plan.data.channel] = str(Path(plan.data.path))
    elif plan.data.source is DataSource.s3:
        channels[plan.data.channel] = str(run_dir / "data" / plan.data.channel)  # downloaded by submit()
    return channels


def to_request(plan: Plan, image: str, *, run_id: str, run_dir: Path) -> LocalRequest:
    """The containers that run `plan` from `image`; `run_dir` is an absolute folder on the host."""
    names = hosts(plan)
    channels = channel_sources(plan, run_dir)
    shared = [
        Mount(str(run_dir / "model"), f"{CONTAINER_ROOT}/model", read_only=False),
        Mount(str(run_dir / "checkpoints"), f"{CONTAINER_ROOT}/checkpoints", read_only=False),
        *(Mount(source, f"{CONTAINER_ROOT}/input/data/{name}", read_only=True) for name, source in channels.items()),
    ]
    environment = {
        **plan.target.environment,
        "DOCKYARD_PLAN": PLAN_PATH,
        "DOCKYARD_RUN_ID": run_id,
    }
    containers = tuple(
        ContainerSpec(
            name=f"dockyard-{run_id}-{host}",
            hostname=host,
            image=image,
            command=("train",),
            environment=environment,
            mounts=(
                Mount(str(run_dir / "nodes" / host / "config"), f"{CONTAINER_ROOT}/input/config", read_only=True),
                Mount(str(run_dir / "nodes" / host / "output"), f"{CONTAINER_ROOT}/output", read_only=False),
                *shared,
            ),
            contract_files=contract_files(plan, host, names, channels),
            gpus=plan.instance.has_gpus,
        )
        for host in names
    )
    downloads = {channels[plan.data.channel]: plan.data.uri} if plan.data.source is DataSource.s3 else {}
    writable = [str(run_dir / name) for name in ("model", "checkpoints")]
    writable += [str(run_dir / "nodes" / host / "output") for host in names]
    return LocalRequest(
        run_id=run_id,
        run_dir=str(run_dir),
        network=f"dockyard-{run_id}",
        max_retries=plan.target.max_retries,
        containers=containers,
        host_folders=tuple(writable),
        downloads=downloads,
    )


def contract_files(plan: Plan, host: str, names: tuple[str, ...], channels: dict[str, str]) -> dict[str, str]:
    """SageMaker's /opt/ml/input/config files for one host."""
    resource = {
        "current_host": host,
        "current_instance_type": INSTANCE_TYPE,
        "current_group_name": GROUP,
        "hosts": list(names),
        "instance_groups": [{"instance_group_name": GROUP, "instance_type": INSTANCE_TYPE, "hosts": list(names)}],
        "network_interface_name": "eth0",
    }
    input_mode = plan.data.input_mode.value
    data_config = {
        name: {"TrainingInputMode": input_mode, "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
        for name in channels
    }
    hyperparameters = plan.trainer.hyperparameters if plan.trainer.entry is Entry.script else {}
    encoded = {key: json.dumps(value) for key, value in hyperparameters.items()}  # SageMaker's encoding
    return {
        "resourceconfig.json": json.dumps(resource, indent=2, sort_keys=True),
        "inputdataconfig.json": json.dumps(data_config, indent=2, sort_keys=True),
        "hyperparameters.json": json.dumps(encoded, indent=2, sort_keys=True),
    }
