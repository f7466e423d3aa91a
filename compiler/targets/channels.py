"""Where `model=hf`'s checkpoint comes from, as the targets need to know it: a folder on this machine (mounted
into the nodes, or on a shared file system), an s3:// prefix (copied before the job or by the platform), or a
Hub id (fetched by the nodes themselves). The nodes look for it in the `pretrained` channel first
(`entrypoint.trainer.models.source`)."""

import stat
from enum import Enum
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.contract import PRETRAINED_CHANNEL
from compiler.spec.errors import ConfigError


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


def check_checkpoint_readable(plan: Plan) -> None:
    """A mounted checkpoint folder is read by the image's own user, not its owner: every file must be readable
    by others (safetensors writes its files 0600, so a fresh `save_pretrained` folder is not)."""
    if checkpoint_source(plan) is not CheckpointSource.folder:
        return
    folder = Path(plan.model.path)
    for path in (folder, *folder.rglob("*")):
        needed = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
        if path.stat().st_mode & needed != needed:
            raise ConfigError(
                "model.path",
                f"{path} is readable only by its owner, and training runs as another user in the containers",
                f"make the checkpoint readable: chmod -R a+rX {folder}",
            )
