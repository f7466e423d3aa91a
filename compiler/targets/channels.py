"""Where `model=hf`'s checkpoint comes from, as the targets need to know it: a folder on this machine (mounted
into the nodes, or on a shared file system), an s3:// prefix (copied before the job or by the platform), or a
Hub id (fetched by the nodes themselves). The nodes look for it in the `pretrained` channel first
(`entrypoint.trainer.models.source`)."""

import os
import stat
from enum import Enum
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.contract import PRETRAINED_CHANNEL
from compiler.spec.errors import ConfigError
from compiler.targets.host_user import HostUser


class CheckpointSource(Enum):
    none = "none"
    folder = "folder"
    s3 = "s3"
    hub = "hub"


def checkpoint_source(plan: Plan) -> CheckpointSource:
    path = plan.model.path
    if plan.model.family != "hf":
        return CheckpointSource.none
    if path.startswith("s3://"):
        return CheckpointSource.s3
    return CheckpointSource.folder if Path(path).is_absolute() else CheckpointSource.hub


def pretrained_channel(plan: Plan, run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """For targets that mount host folders (local, Slurm): the `pretrained` channel's folder by channel name,
    and the S3 prefix to copy into it before the job starts (folder → s3:// prefix)."""
    source = checkpoint_source(plan)
    if source is CheckpointSource.folder:
        return {PRETRAINED_CHANNEL: plan.model.path}, {}
    if source is CheckpointSource.s3:
        folder = str(run_dir / "data" / PRETRAINED_CHANNEL)
        return {PRETRAINED_CHANNEL: folder}, {folder: plan.model.path}
    return {}, {}


def check_checkpoint_reachable(plan: Plan, target: str) -> None:
    """A target whose nodes cannot see this machine's folders needs the checkpoint on S3 or the Hub."""
    if checkpoint_source(plan) is CheckpointSource.folder:
        raise ConfigError(
            "model.path",
            f"{plan.model.path} is a folder on this machine, which {target}'s nodes cannot read",
            "upload it (aws s3 sync) and set model.path=s3://bucket/prefix, or give a Hub id",
        )


def check_checkpoint_readable(plan: Plan, runs_as: HostUser | None) -> None:
    """A mounted checkpoint folder is read in the containers by `runs_as`, the user who launches the run (who
    reads what it can read here, 0600 files included), or, for a launch by root, by the image's own user: then
    every file must be readable by others (safetensors writes its files 0600)."""
    if checkpoint_source(plan) is not CheckpointSource.folder:
        return
    folder = Path(plan.model.path)
    for path in (folder, *folder.rglob("*")):
        if runs_as is None and not _readable_by_others(path):
            raise ConfigError(
                "model.path",
                f"{path} is readable only by its owner, and training runs as the image's user when root launches",
                f"launch as its owner, or make the checkpoint readable: chmod -R a+rX {folder}",
            )
        if runs_as is not None and not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            raise ConfigError(
                "model.path",
                f"{path} cannot be read by uid {runs_as.uid}, who launches the run and trains in its containers",
                f"launch as a user who can read the checkpoint, or make it readable: chmod -R a+rX {folder}",
            )


def _readable_by_others(path: Path) -> bool:
    needed = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
    return path.stat().st_mode & needed == needed
