"""What a target offers the generic rules, so the planner asks about a feature and never names a target.

The layer above the planner resolves the plan's target once and hands the planner its `Capabilities`, with
every registered target's by kind (`TargetCapabilities`) for messages that say where else a setting works.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from compiler.spec import DataSource


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What the generic rules need to know about a target, so they never name one."""

    host_cpu: bool
    """Runs on the CPUs of machines it does not choose (`hardware=cpu`: local containers, a cluster's
    nodes); a target that starts instances needs a catalog type instead (ml.m5.xlarge)."""
    host_folders: bool
    """Mounts a folder of the submitting host as a channel (`data=local`)."""
    file_systems: tuple[DataSource, ...] = ()
    """Shared file systems it mounts as channels (fsx, efs)."""
    smddp: bool = False
    """Provides SageMaker's distributed data-parallel library."""
    instance_groups: bool = False
    """Runs a heterogeneous cluster (`hardware.groups`): instance groups with their own types and commands."""
    warm_pools: bool = False
    """Keeps a finished job's instances for the next one (`dockyard warm-pool release RUN` ends that)."""
    managed_prices: bool = False
    """Bills the instances at its own rate (SageMaker's `ml.` training price), not EC2's."""


@dataclass(frozen=True)
class TargetCapabilities:
    """The plan's own target's capabilities, and every registered target's by kind."""

    own: Capabilities
    registered: Mapping[str, Capabilities]

    def kinds_with(self, source: DataSource) -> list[str]:
        """The targets that mount `source`'s file systems, in registry order."""
        return [kind for kind, capabilities in self.registered.items() if source in capabilities.file_systems]
