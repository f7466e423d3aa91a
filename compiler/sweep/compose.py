"""Every point of a sweep composed as Hydra's basic launcher composes it.

The launcher's `load_sweep_config` goes through dockyard's compose cache (`compiler.config.cache`): points
that differ only in plain values share one composition of their group choices, and each point pays only
for its own overrides. Tests check the result equals a full compose, the `hydra` node (overrides,
override_dirname, job number) included.
"""

from collections.abc import Sequence

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from omegaconf import DictConfig, OmegaConf, open_dict

from compiler.config import cache


class PointComposer:
    def __init__(self, config_loader: ConfigLoaderImpl, master_config: DictConfig) -> None:
        self.loader = config_loader
        self.master = master_config

    def compose(self, overrides: Sequence[str], num: int) -> DictConfig:
        """The config Hydra's basic launcher would give job `num` (Hydra's exceptions on a bad point)."""
        cfg = self.loader.load_sweep_config(self.master, list(overrides))
        with open_dict(cfg.hydra):
            cfg.hydra.job.id = num
            cfg.hydra.job.num = num
        return cfg

    def warm(self, points: Sequence[Sequence[str]]) -> None:
        """Compose now what the points' compositions share (see `cache.warm`), as `compose` would ask for it."""
        hydra_overrides = OmegaConf.to_container(self.master.hydra.overrides.hydra)
        assert isinstance(hydra_overrides, list)
        config_name = self.master.hydra.job.config_name
        cache.warm(self.loader, config_name, [[*hydra_overrides, *overrides] for overrides in points])
