"""The `hardware/` group: instance type, nodes, processes, heterogeneous groups."""

from dataclasses import dataclass, field

from compiler.spec.schema.missing import MISSING


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
    """An instance type of `compiler/core/catalog.py` (p5.48xlarge, ...), or `cpu` for CPU-only nodes."""
    nodes: int = 1
    """Instances (nodes) the job runs on."""
    processes_per_node: int = -1
    """-1 means one process per GPU; on `cpu` it must be set."""
    price_per_hour: float | None = None
    """Overrides the catalog's on-demand price (a discount, another region)."""
    network_gbps: float | None = None
    """The network each node sends and receives at (Gbit/s, all its NICs together), where it is not the
    catalog's (another cluster's fabric: 8 × 200 Gbit/s InfiniBand is 1600)."""
    memory_check: bool = True
    """Refuse a plan whose predicted peak exceeds GPU memory; false makes that a warning."""
    groups: dict[str, InstanceGroup] = field(default_factory=dict)
    """Further instance groups (a heterogeneous cluster): each runs `trainer.group_commands.<name>`, and
    only the training group (`instance_type` × `nodes`, named `train_group`) trains."""
    train_group: str = "train"
    """The training group's name where `groups` is set."""
