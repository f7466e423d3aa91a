"""Which cluster this container landed on, and which node of it it is.

Each source is a small pure function of the environment (and, for SageMaker, the contract files under a
root folder that tests point at fixtures). `discover` tries them in a fixed order: SageMaker, Kubeflow,
Slurm, SkyPilot, explicit DOCKYARD_* variables, else a single node. The node rank always comes from a
host list that every node sees identically (or from a rank the scheduler hands out), never from a
race between nodes.
"""

import json
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from compiler.spec.contract import CODE_DIR, CONTAINER_ROOT
from compiler.spec.hostlist import HostListError, expand_hostlist

DEFAULT_PORT = 29500
SAGEMAKER_ROOT = Path(CONTAINER_ROOT)


class ClusterError(RuntimeError):
    """The cluster's description is inconsistent or its hosts cannot be reached."""


@dataclass(frozen=True)
class Paths:
    """Where the job reads data and writes its model, checkpoints and failure reason.

    SageMaker's training contract fixes these under /opt/ml; other clusters use the same layout under
    DOCKYARD_ROOT so a job behaves the same everywhere.
    """

    root: Path

    @property
    def code(self) -> Path:
        """`trainer.source_dir` in the image (contract.CODE_DIR under /opt/ml)."""
        return self.root / PurePosixPath(CODE_DIR).relative_to(CONTAINER_ROOT)

    @property
    def input(self) -> Path:
        return self.root / "input"

    @property
    def config(self) -> Path:
        """SageMaker's contract files: resourceconfig.json, inputdataconfig.json, hyperparameters.json."""
        return self.root / "input" / "config"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def output_dir(self) -> Path:
        """Where the failure file lies; SageMaker uploads its data/ folder."""
        return self.root / "output"

    @property
    def output(self) -> Path:
        return self.root / "output" / "data"

    @property
    def intermediate(self) -> Path:
        return self.root / "output" / "intermediate"

    @property
    def failure(self) -> Path:
        return self.root / "output" / "failure"

    def restart_notes(self, host: str) -> Path:
        """What one node's in-job restarts need to know (`trainer.restarts`): the trainer makes the folder
        when the job starts, the entrypoint notes each worker failure there (the cause of a restart), and the
        restarted trainer reads it. One folder per host, as the nodes may share the output folder (Slurm)."""
        return self.root / "output" / "restarts" / host

    def channel(self, name: str) -> Path:
        return self.root / "input" / "data" / name


@dataclass(frozen=True, kw_only=True)
class Node:
    source: str
    """sagemaker, kubeflow, slurm, skypilot, dockyard or single."""
    hosts: tuple[str, ...]
    """Every node's host name in rank order; only the master where the scheduler hands out ranks."""
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    network_interface: str | None = None
    """The interface the cluster says nodes talk over (SageMaker names it); None to detect it."""
    hyperparameters: Mapping[str, str] | None = None
    """SageMaker's hyperparameters.json: the job's values, each JSON-encoded in a string."""
    channels: tuple[str, ...] = ()
    """SageMaker's input channels (inputdataconfig.json)."""
    resource_config: Mapping[str, object] | None = None
    """SageMaker's resourceconfig.json as it is; None on other clusters."""
    input_data_config: Mapping[str, object] | None = None
    """SageMaker's inputdataconfig.json as it is; None on other clusters."""

    @property
    def host_names(self) -> tuple[str, ...]:
        """Every node's name, also where the scheduler names only the master (node-<rank> for each)."""
        return self.hosts if len(self.hosts) == self.nnodes else tuple(f"node-{i}" for i in range(self.nnodes))

    @property
    def current_host(self) -> str:
        return self.host_names[self.node_rank]


def _port(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        if env.get(name):
            return int(env[name])
    return DEFAULT_PORT


def _natural(host: str) -> list:
    """Sort key: algo-2 before algo-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", host)]


def _from_host_list(source: str, hosts: list[str], current: str, port: int, **extra) -> Node:
    ordered = tuple(sorted(set(hosts), key=_natural))
    if current not in ordered:
        raise ClusterError(f"{source}: this host '{current}' is not in the host list {', '.join(ordered)}")
    return Node(
        source=source,
        hosts=ordered,
        nnodes=len(ordered),
        node_rank=ordered.index(current),
        master_addr=ordered[0],
        master_port=port,
        **extra,
    )


def from_sagemaker(root: Path, env: Mapping[str, str]) -> Node | None:
    """SageMaker's training contract: /opt/ml/input/config/resourceconfig.json and friends."""
    config = root / "input" / "config"
    resources = config / "resourceconfig.json"
    if not resources.is_file():
        return None
    data = _contract_file(resources)
    hosts, current = data.get("hosts"), data.get("current_host")
    if not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts) and isinstance(current, str)):
        raise ClusterError(f"sagemaker: {resources} needs current_host, a string, and hosts, a list of strings")
    hyperparameters = _contract_file(config / "hyperparameters.json")
    inputs = _contract_file(config / "inputdataconfig.json")
    return _from_host_list(
        "sagemaker",
        hosts,
        current,
        _port(env, "DOCKYARD_MASTER_PORT"),
        network_interface=data.get("network_interface_name"),
        hyperparameters={str(k): str(v) for k, v in hyperparameters.items()},
        channels=tuple(sorted(inputs)),
        resource_config=data,
        input_data_config=inputs,
    )


def _contract_file(path: Path) -> dict:
    """One of SageMaker's contract files: a JSON object, or {} where the file is absent. One that does not
    decode is a ClusterError naming it, so that every node says so in one line."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except ValueError as error:  # JSON's errors and a file that is not UTF-8
        raise ClusterError(f"sagemaker: {path} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ClusterError(f"sagemaker: {path} holds {json.dumps(value)[:40]}, not a JSON object")
    return value


def current_group(node: Node) -> str | None:
    """This node's instance group on a heterogeneous SageMaker cluster (resourceconfig.json's
    `current_group_name`); None on a cluster of one group."""
    config = node.resource_config or {}
    return config.get("current_group_name") if len(config.get("instance_groups", [])) > 1 else None


def within_group(node: Node, group: str) -> Node:
    """The node among `group`'s hosts only: a group's processes (torchrun's world for the training group)
    span that group, and its first host is their master."""
    groups = {g["instance_group_name"]: g["hosts"] for g in (node.resource_config or {}).get("instance_groups", [])}
    if not groups.get(group):
        raise ClusterError(f"{node.source}: no instance group '{group}' in resourceconfig.json ({', '.join(groups)})")
    grouped = _from_host_list(node.source, groups[group], node.current_host, node.master_port)
    return replace(node, hosts=grouped.hosts, nnodes=grouped.nnodes, node_rank=grouped.node_rank,
                   master_addr=grouped.master_addr)  # fmt: skip


def from_kubeflow(env: Mapping[str, str]) -> Node | None:
    """Kubeflow's PyTorchJob: the operator sets PET_* (torchrun's own variables) or MASTER_ADDR and RANK."""
    if "PET_NNODES" in env and "PET_MASTER_ADDR" in env:
        nnodes = int(env["PET_NNODES"].split(":")[-1])
        rank = int(env.get("PET_NODE_RANK", env.get("RANK", "0")))
        master, port = env["PET_MASTER_ADDR"], _port(env, "PET_MASTER_PORT", "MASTER_PORT")
    elif "MASTER_ADDR" in env and "KUBERNETES_SERVICE_HOST" in env:
        nnodes, rank = int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0"))
        master, port = env["MASTER_ADDR"], _port(env, "MASTER_PORT")
    else:
        return None
    if not 0 <= rank < nnodes:
        raise ClusterError(f"kubeflow: node rank {rank} is outside 0..{nnodes - 1}")
    return Node(source="kubeflow", hosts=(master,), nnodes=nnodes, node_rank=rank, master_addr=master, master_port=port)


def _hosts(text: str) -> list[str]:
    try:
        return expand_hostlist(text)
    except HostListError as error:
        raise ClusterError(str(error)) from None


def from_slurm(env: Mapping[str, str]) -> Node | None:
    """Slurm: the job's node list (identical on every node) and this node's name in it."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist or "SLURMD_NODENAME" not in env:
        return None
    return _from_host_list("slurm", _hosts(nodelist), env["SLURMD_NODENAME"], _port(env, "MASTER_PORT"))


def from_skypilot(env: Mapping[str, str]) -> Node | None:
    """SkyPilot: SKYPILOT_NODE_IPS (one per line, head first) and SKYPILOT_NODE_RANK."""
    if "SKYPILOT_NODE_IPS" not in env or "SKYPILOT_NODE_RANK" not in env:
        return None
    ips = tuple(ip for ip in env["SKYPILOT_NODE_IPS"].split() if ip)
    rank = int(env["SKYPILOT_NODE_RANK"])
    if not 0 <= rank < len(ips):
        raise ClusterError(f"skypilot: node rank {rank} is outside the {len(ips)} node IPs")
    port = _port(env, "DOCKYARD_MASTER_PORT")
    return Node(source="skypilot", hosts=ips, nnodes=len(ips), node_rank=rank, master_addr=ips[0], master_port=port)


def from_dockyard(env: Mapping[str, str]) -> Node | None:
    """Explicit: DOCKYARD_HOSTS=a,b,c (or Slurm's compressed form, a[0-2]) and DOCKYARD_CURRENT_HOST=b (or
    DOCKYARD_NODE_RANK=1)."""
    if "DOCKYARD_HOSTS" not in env:
        return None
    hosts = [h.strip() for h in _hosts(env["DOCKYARD_HOSTS"]) if h.strip()]
    port = _port(env, "DOCKYARD_MASTER_PORT")
    if "DOCKYARD_CURRENT_HOST" in env:
        return _from_host_list("dockyard", hosts, env["DOCKYARD_CURRENT_HOST"], port)
    rank = int(env.get("DOCKYARD_NODE_RANK", "0"))
    if not 0 <= rank < len(hosts):
        raise ClusterError(f"dockyard: DOCKYARD_NODE_RANK={rank} is outside the {len(hosts)} DOCKYARD_HOSTS")
    return Node(
        source="dockyard", hosts=tuple(hosts), nnodes=len(hosts), node_rank=rank, master_addr=hosts[0], master_port=port
    )


def single_node(env: Mapping[str, str]) -> Node:
    port = _port(env, "DOCKYARD_MASTER_PORT", "MASTER_PORT")
    return Node(source="single", hosts=("127.0.0.1",), nnodes=1, node_rank=0, master_addr="127.0.0.1", master_port=port)


def discover(env: Mapping[str, str], sagemaker_root: Path = SAGEMAKER_ROOT) -> Node:
    """The first source that recognises its own signs, in the documented order."""
    for source in (
        lambda: from_sagemaker(sagemaker_root, env),
        lambda: from_kubeflow(env),
        lambda: from_slurm(env),
        lambda: from_skypilot(env),
        lambda: from_dockyard(env),
    ):
        node = source()
        if node is not None:
            return node
    return single_node(env)


def wait_for_hosts(
    hosts: tuple[str, ...],
    timeout: float,
    resolve: Callable[[str], object] = socket.gethostbyname,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Block until every host resolves (DNS for later nodes often appears late), or raise after `timeout`."""
    deadline = clock() + timeout
    pending = list(hosts)
    while True:
        for host in list(pending):
            try:
                resolve(host)
                pending.remove(host)
            except OSError:
                pass
        if not pending:
            return
        if clock() >= deadline:
            raise ClusterError(f"hosts did not resolve within {timeout:.0f} s: {', '.join(pending)}")
        sleep(1.0)
