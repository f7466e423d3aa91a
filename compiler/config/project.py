"""The user's project: the folder of their own configs, searched before dockyard's, and the folder that holds
it, from which a relative `trainer.source_dir` is read.

The config folder is Hydra's `--config-dir` (`-cd`); without one, `$DOCKYARD_CONFIG_DIR`, or else the current
folder's `conf/`. Hydra puts it on the config search path ahead of dockyard's own `conf/`, so the user's
`experiment/mine.yaml` is a choice like the built-in ones, and one of theirs named like one of dockyard's
wins. The compose cache hashes every folder of the search path, the user's included (`stored.py`).
"""

import os
from pathlib import Path

from omegaconf import DictConfig

from compiler.config.compose import CONF_DIR
from compiler.spec.errors import ConfigError

CONFIG_DIR_VARIABLE = "DOCKYARD_CONFIG_DIR"
PROJECT_CONF = "conf"
CONFIG_DIR_FLAGS = ("-cd", "--config-dir")
NAMING_FLAGS = (*CONFIG_DIR_FLAGS, "-cp", "--config-path")
COMMAND_LINE = "command-line"
"""The provider Hydra names the `--config-dir` folder by in `hydra.runtime.config_sources`."""


def user_config_dir(args: list[str]) -> Path | None:
    """The user's config folder when the command line names none (`-cd`, or `-cp` for a primary config of
    their own): `$DOCKYARD_CONFIG_DIR`, or the current folder's `conf/` (unless it is dockyard's own, in a
    checkout of dockyard)."""
    if any(arg in NAMING_FLAGS or arg.startswith(("--config-dir=", "--config-path=")) for arg in args):
        return None
    named = os.environ.get(CONFIG_DIR_VARIABLE)
    if named:
        folder = Path(named).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(CONFIG_DIR_VARIABLE, f"'{named}' is not a folder", "point it at your config folder")
        return folder
    folder = Path.cwd() / PROJECT_CONF
    return folder if folder.is_dir() and folder.resolve() != CONF_DIR else None


def project_dir(hydra_cfg: DictConfig) -> Path:
    """The folder holding the user's config folder, or the current folder where there is none."""
    for source in hydra_cfg.runtime.config_sources:
        if source.provider == COMMAND_LINE and source.schema == "file":
            return Path(source.path).parent
    return Path.cwd()


def config_dirs(args: list[str]) -> list[Path]:
    """The config folders a command line reads, the user's first (what `--help` lists the options of)."""
    named = next((Path(args[i + 1]) for i, arg in enumerate(args[:-1]) if arg in CONFIG_DIR_FLAGS), None)
    named = named or next((Path(arg.partition("=")[2]) for arg in args if arg.startswith("--config-dir=")), None)
    try:
        user = named or user_config_dir(args)
    except ConfigError:
        user = None  # the command itself says so
    return [user, CONF_DIR] if user is not None and user.is_dir() else [CONF_DIR]
