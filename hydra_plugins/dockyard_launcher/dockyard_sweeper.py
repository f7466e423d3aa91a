"""`hydra/sweeper=dockyard` (dockyard's default): Hydra's basic sweeper, less its pre-check of every point
when dockyard's launcher runs dockyard's launch task.

The basic sweeper composes every point once before handing the batch to the launcher, and stops at the
first point that does not compose. dockyard's launcher composes and validates every point itself before
anything runs, and reports all the invalid ones, so there the pre-check would only double the cost of a
large sweep and hide all but the first mistake. Everywhere else it checks as Hydra does.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore

from hydra_plugins.dockyard_launcher.dockyard_launcher import DockyardLauncher


@dataclass
class DockyardSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.dockyard_launcher.dockyard_sweeper.DockyardSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="dockyard", node=DockyardSweeperConf, provider="dockyard")


class DockyardSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if isinstance(self.launcher, DockyardLauncher) and self.launcher.validates_every_point():
            return
        super().validate_batch_is_legal(batch)
