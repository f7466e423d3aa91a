"""`hydra/launcher=dockyard`: the launcher's options, registered with Hydra's ConfigStore."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class DockyardLauncherConf:
    _target_: str = "hydra_plugins.dockyard_launcher.dockyard_launcher.DockyardLauncher"
    max_concurrent: int = 4
    """Jobs running at once; the others wait for a free slot."""
    skip_invalid: bool = False
    """Run the valid points when some are invalid (by default one invalid point stops the whole sweep)."""
    dry_run: bool = False
    """List every job and write the request it would submit; build, start and submit nothing."""
    wait: bool = True
    """Follow remote jobs to their end; false submits them and returns (`dockyard status SWEEP_DIR` later)."""
    objective: str | None = None
    """A final metric (`loss`, `tokens_per_s`) returned to the sweeper as each point's value (Optuna needs one)."""


ConfigStore.instance().store(group="hydra/launcher", name="dockyard", node=DockyardLauncherConf, provider="dockyard")
