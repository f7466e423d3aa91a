"""The local target's own rules: what a container on this machine's Docker engine needs."""

from pathlib import Path

from compiler.spec import DataSource, Plan
from compiler.spec.contract import CONTAINER_ROOT, NODES_PER_HOST, SYSTEM_FOLDERS
from compiler.spec.errors import ConfigError
from compiler.targets.channels import check_checkpoint_readable
from compiler.targets.host_user import invoking_user

MAX_CONTAINERS = 64
"""The most nodes (containers) one local job starts. They all run on this machine, and each is given the
whole host list (SageMaker's resourceconfig.json), so the request grows with the square of their number:
a hundred thousand would take more memory than the machine has before a container started."""

MAX_PROCESSES = 256
"""The most training processes one local job starts, all on this machine."""

CLUSTER_TARGETS = "or a cluster target (target=slurm, target=kubernetes or target=sagemaker)"


def check(plan: Plan) -> list[str]:
    _check_size(plan)
    if NODES_PER_HOST in plan.target.environment:
        raise ConfigError(
            f"target.environment.{NODES_PER_HOST}",
            "is set by the local target, whose containers all share this machine",
            "remove it (set OMP_NUM_THREADS to choose the threads yourself)",
        )
    _check_data(plan)
    check_checkpoint_readable(plan, invoking_user())
    return []


def _check_size(plan: Plan) -> None:
    nodes = plan.layout.nodes
    containers = nodes + sum(group.count for group in plan.hardware.groups.values())
    if containers > MAX_CONTAINERS:
        raise ConfigError(
            "hardware.nodes" if nodes > MAX_CONTAINERS else "hardware.groups",
            f"asks for {containers} containers, and the local target starts at most {MAX_CONTAINERS} on this machine",
            f"use fewer nodes, {CLUSTER_TARGETS}",
        )
    if plan.layout.world_size > MAX_PROCESSES:
        raise ConfigError(
            "hardware.processes_per_node",
            f"{nodes} nodes × {plan.layout.processes_per_node} processes = {plan.layout.world_size} processes, "
            f"and the local target starts at most {MAX_PROCESSES} on this machine",
            f"use fewer processes per node, {CLUSTER_TARGETS}",
        )


def _check_data(plan: Plan) -> None:
    """A host folder of token files is mounted into every node: it must be an absolute path that exists
    (a relative one would depend on where the job is started, and Docker would create a missing one)."""
    data = plan.data
    if data.source is DataSource.local:
        if not data.path or not Path(data.path).is_absolute():
            raise ConfigError(
                "data.path", f"'{data.path}' is not an absolute path", "give the host folder as /path/to/tokens"
            )
        if not Path(data.path).is_dir():
            raise ConfigError(
                "data.path", f"'{data.path}' is not a folder on this machine", "give the token files' folder"
            )
    for folder in dataset_folders(plan):
        parts = Path(folder).parts
        if len(parts) < 2 or parts[1] in SYSTEM_FOLDERS or folder.startswith(CONTAINER_ROOT):
            raise ConfigError(
                "data.mixture" if data.mixture else "data.name",
                f"{folder} is mounted at its own path in the containers, where it would hide the image's files",
                "move the dataset's folder elsewhere, like under /data or your home folder",
            )


def dataset_folders(plan: Plan) -> list[str]:
    """`data=hf`'s datasets in folders of this machine (`data.name`, `data.mixture`): each is mounted read-only at
    the same path in every node, where `load_dataset` on the node finds them under the plan's names."""
    if plan.data.source is not DataSource.hf:
        return []
    names = [entry["name"] for entry in plan.data.mixture] if plan.data.mixture else [plan.data.name]
    return list(dict.fromkeys(str(name) for name in names if Path(str(name)).is_absolute()))
