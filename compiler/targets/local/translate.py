"""The local target: one container per node on a Docker network, each given SageMaker's training contract.

`to_request` is pure: the plan, the image and the run's folder in, a `LocalRequest` out, which renders
itself as JSON (what `--dry-run` prints and golden files hold). Containers are named `algo-1..N`, as in
SageMaker, and see exactly what a SageMaker training container sees: the contract files under
/opt/ml/input/config, every channel read-only under /opt/ml/input/data/<channel>, and /opt/ml/model,
/opt/ml/output and /opt/ml/checkpoints, which are folders of the run on the host. The plan itself
arrives as the `plan` channel, so the same image runs unchanged here and on SageMaker.
"""

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from compiler.core.catalog import LOCAL_CPU, instance_type
from compiler.spec import DataSource, Entry, Plan
from compiler.spec.contract import CONTAINER_ROOT, NODES_PER_HOST, PLAN_CHANNEL, PLAN_PATH, RUN_AS, TOKENIZER_CHANNEL
from compiler.spec.schema import DataFormat
from compiler.spec.tokenizer import tokenizer_location
from compiler.targets.channels import pretrained_channel
from compiler.targets.host_user import HostUser
from compiler.targets.local import rules

HOST_ALIAS = "host.docker.internal"
"""The host, as the containers name it (Docker Desktop's name, given to every container here)."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
"""Hosts of a tracking URI on the host's loopback (IPv4: the relay connects to 127.0.0.1)."""
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
    max_run_seconds: int
    """`target.max_run_hours`: an attempt still running after it is stopped."""
    containers: tuple[ContainerSpec, ...]
    host_folders: tuple[str, ...] = field(default=())
    """Folders of the run the containers write to; the entrypoint hands them to its user (or checks them)."""
    downloads: dict[str, str] = field(default_factory=dict)
    """S3 channels copied into the run before the containers start: host folder -> s3:// prefix."""
    loopback_ports: tuple[int, ...] = field(default=())
    """Ports of servers on the host's loopback (a tracker's) that the containers reach at `HOST_ALIAS`."""

    @property
    def image(self) -> str:
        return self.containers[0].image

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def __str__(self) -> str:
        return self.to_json()


@dataclass(frozen=True)
class Group:
    name: str
    instance_type: str
    hosts: tuple[str, ...]
    gpus: bool
    trains: bool


def groups(plan: Plan) -> tuple[Group, ...]:
    """The cluster's instance groups, hosts numbered across them as SageMaker does (`algo-1..N`): one group
    of the plan's nodes, or the training group first and then each of `hardware.groups`."""
    hardware = plan.hardware
    if not hardware.groups:
        names = tuple(f"algo-{i + 1}" for i in range(plan.layout.nodes))
        return (Group(GROUP, INSTANCE_TYPE, names, plan.instance.has_gpus, trains=True),)
    sizes = [(hardware.train_group, plan.instance, plan.layout.nodes, True)]
    sizes += [(name, instance_type(g.instance_type), g.count, False) for name, g in hardware.groups.items()]
    made, first = [], 1
    for name, instance, count, trains in sizes:
        names = tuple(f"algo-{first + i}" for i in range(count))
        shown = INSTANCE_TYPE if instance.name == LOCAL_CPU.name else f"ml.{instance.name}"
        made.append(Group(name, shown, names, instance.has_gpus, trains))
        first += count
    return tuple(made)


def hosts(plan: Plan) -> tuple[str, ...]:
    return tuple(host for group in groups(plan) for host in group.hosts)


def channel_sources(plan: Plan, run_dir: Path, group: str | None = None) -> dict[str, str]:
    """Host folders mounted as channels: the plan, a pretrained checkpoint, and the data (and a host tokenizer)
    unless it is synthetic or `data.groups` leaves `group` out (as SageMaker's InstanceGroupNames does)."""
    channels = {PLAN_CHANNEL: str(run_dir / "plan"), **pretrained_channel(plan, run_dir)[0]}
    if group is not None and plan.data.groups and group not in plan.data.groups:
        return channels
    if plan.data.source is DataSource.local:
        channels[plan.data.channel] = str(Path(plan.data.path))
    elif plan.data.source is DataSource.s3:
        channels[plan.data.channel] = str(run_dir / "data" / plan.data.channel)  # downloaded by submit()
    tokenizer = tokenizer_location(plan.data, plan.model)
    if plan.data.format is not DataFormat.tokens and tokenizer and not tokenizer.startswith("s3://"):
        channels[TOKENIZER_CHANNEL] = tokenizer
    return channels


def to_request(plan: Plan, image: str, *, run_id: str, run_dir: Path, runs_as: HostUser | None = None) -> LocalRequest:
    """The containers that run `plan` from `image`; `run_dir` is an absolute folder on the host. Training runs
    as `runs_as`, the user who launched it (`compiler.targets.host_user`), or as the image's user for root."""
    cluster = groups(plan)
    names = hosts(plan)
    shared = [
        Mount(str(run_dir / "model"), f"{CONTAINER_ROOT}/model", read_only=False),
        Mount(str(run_dir / "checkpoints"), f"{CONTAINER_ROOT}/checkpoints", read_only=False),
        *token_cache_mount(plan),
        *dataset_mounts(plan),
    ]
    tracker_uri, loopback_ports = mlflow_from_containers(plan)
    environment = {
        **plan.target.environment,
        "DOCKYARD_PLAN": PLAN_PATH,
        "DOCKYARD_RUN_ID": run_id,
        NODES_PER_HOST: str(len(names)),
        **({RUN_AS: str(runs_as)} if runs_as else {}),
        **({"DOCKYARD_MLFLOW_TRACKING_URI": tracker_uri} if tracker_uri else {}),
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
                *(
                    Mount(source, f"{CONTAINER_ROOT}/input/data/{name}", read_only=group.trains)
                    for name, source in channel_sources(plan, run_dir, group.name).items()
                ),
            ),
            contract_files=contract_files(plan, host, cluster, channel_sources(plan, run_dir, group.name)),
            gpus=group.gpus,
        )
        for group in cluster
        for host in group.hosts
    )
    channels = channel_sources(plan, run_dir)
    downloads = {channels[plan.data.channel]: plan.data.uri} if plan.data.source is DataSource.s3 else {}
    downloads |= pretrained_channel(plan, run_dir)[1]
    writable = [str(run_dir / name) for name in ("model", "checkpoints")] + [m.source for m in token_cache_mount(plan)]
    writable += [str(run_dir / "nodes" / host / "output") for host in names]
    return LocalRequest(
        run_id=run_id,
        run_dir=str(run_dir),
        network=f"dockyard-{run_id}",
        max_retries=plan.target.max_retries,
        max_run_seconds=math.ceil(plan.target.max_run_hours * 3600),
        containers=containers,
        host_folders=tuple(writable),
        downloads=downloads,
        loopback_ports=loopback_ports,
    )


def token_cache_mount(plan: Plan) -> list[Mount]:
    """`data.cache` names a folder of this machine, mounted at the same path in every node: the token cache that
    `dockyard tokenize` fills and later runs read, which the nodes share."""
    if plan.data.cache is None or plan.data.format is DataFormat.tokens:
        return []
    return [Mount(plan.data.cache, plan.data.cache, read_only=False)]


def dataset_mounts(plan: Plan) -> list[Mount]:
    return [Mount(folder, folder, read_only=True) for folder in rules.dataset_folders(plan)]


def alongside(request: LocalRequest, runs: int) -> LocalRequest:
    """The request of a run started beside `runs - 1` others like it on this machine (a sweep's points at once):
    its nodes' share of the CPUs counts their containers too."""
    nodes = str(len(request.containers) * runs)
    containers = tuple(replace(c, environment={**c.environment, NODES_PER_HOST: nodes}) for c in request.containers)
    return replace(request, containers=containers)


def mlflow_from_containers(plan: Plan) -> tuple[str | None, tuple[int, ...]]:
    """The MLflow tracking URI as the containers reach it, and the loopback port to open for them: a server
    on the host's loopback is at `HOST_ALIAS` (the runner relays its port); any other URI stays as it is."""
    uri = plan.trainer.mlflow.tracking_uri
    if "mlflow" not in plan.trainer.trackers or uri is None:
        return None, ()
    parts = urlsplit(uri)
    if parts.hostname not in LOOPBACK_HOSTS:
        return None, ()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return urlunsplit(parts._replace(netloc=f"{HOST_ALIAS}:{port}")), (port,)


def contract_files(plan: Plan, host: str, cluster: tuple[Group, ...], channels: dict[str, str]) -> dict[str, str]:
    """SageMaker's /opt/ml/input/config files for one host."""
    mine = next(group for group in cluster if host in group.hosts)
    resource = {
        "current_host": host,
        "current_instance_type": mine.instance_type,
        "current_group_name": mine.name,
        "hosts": [name for group in cluster for name in group.hosts],
        "instance_groups": [
            {"instance_group_name": g.name, "instance_type": g.instance_type, "hosts": list(g.hosts)} for g in cluster
        ],
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
