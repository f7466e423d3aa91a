"""Who trains. SageMaker starts a container as root and mounts /opt/ml from root-owned folders (its SDK's
local mode from 0700 ones), so the image starts as root: the entrypoint makes the paths training writes
the unprivileged user's, makes the inputs readable, and starts torchrun as that user with Debian's
`setpriv`. Started as another user (a Kubernetes `runAsUser`, `docker run -u`), it trains as that user and
first checks that it can write where training writes, naming the path it cannot.
"""

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from entrypoint.launcher.cluster import Paths


class PathError(RuntimeError):
    """A path training writes or reads is not usable by the user it runs as."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


def find_account(name: str, uid_map: Path = Path("/proc/self/uid_map")) -> Account | None:
    """The image's user, where root can become it: not where root is the only user of a user namespace
    (enroot with root remapped, rootless Docker), which could neither chown to it nor switch to it."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if uid_map.is_file() and not any(
        int(inside) <= entry.pw_uid < int(inside) + int(count)
        for inside, _, count in (line.split() for line in uid_map.read_text().splitlines() if line.strip())
    ):
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def drop_to(account: Account) -> tuple[str, ...]:
    """The command prefix that runs the rest as `account`, with its groups and no way back to root."""
    return ("setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups", "--no-new-privs", "--")


def written(paths: Paths) -> tuple[Path, ...]:
    """What training writes: the model, checkpoints, and the output folder (data, failure, intermediate)."""
    return (paths.model, paths.checkpoints, paths.output_dir, paths.output, paths.intermediate)


def read(paths: Paths, channels: tuple[str, ...]) -> tuple[Path, ...]:
    """The folders training reads: the contract files' and each channel's (not the data inside)."""
    return (paths.input, paths.config, paths.input / "data", *(paths.channel(name) for name in channels))


def hand_over(paths: Paths, channels: tuple[str, ...], plan: Path, account: Account) -> None:
    """As root: the written paths (and what is in them, such as an earlier attempt's checkpoints) become
    the account's; the folders read, the contract files and the plan become readable by everyone."""
    for folder in written(paths):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for path in (folder, *folder.rglob("*")):
                os.chown(path, account.uid, account.gid, follow_symlinks=False)
        except OSError as error:
            raise PathError(f"cannot make {folder} writable for {account.name}: {error.strerror}") from None
    for folder in read(paths, channels):
        if not folder.is_dir():
            continue
        _allow_others(folder, stat.S_IROTH | stat.S_IXOTH)
        if folder == paths.config:
            for file in folder.iterdir():
                _allow_others(file, stat.S_IROTH)
    _allow_others(plan.parent, stat.S_IROTH | stat.S_IXOTH)
    _allow_others(plan, stat.S_IROTH)


def _allow_others(path: Path, bits: int) -> None:
    mode = path.stat().st_mode
    if mode & bits == bits:
        return
    try:
        path.chmod(mode | bits)
    except OSError as error:  # a read-only mount of a folder only its owner may read
        raise PathError(f"cannot make {path} readable by the user training runs as: {error.strerror}") from None


def check_writable(paths: Paths) -> None:
    """As any other user: every written path exists (or can be made) and can be written."""
    for folder in written(paths):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PathError(f"cannot create {folder} as uid {os.getuid()}: {error.strerror}") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PathError(f"{folder} is not writable by uid {os.getuid()}: training writes there")
