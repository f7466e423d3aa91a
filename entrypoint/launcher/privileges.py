"""Who trains. SageMaker starts a container as root and mounts /opt/ml from root-owned folders (its SDK's
local mode from 0700 ones), so the image starts as root: the entrypoint makes the paths training writes
the unprivileged user's, makes the inputs readable, and starts torchrun as that user with Debian's
`setpriv`. Containers started on the user's own machines (the local target, Slurm's docker runtime) name
the user who launched the run in `DOCKYARD_RUN_AS` (uid:gid): root prepares the paths for that user, gives it a
passwd entry and a home where the image has none, and drops to it, so the run's files on the host are theirs.
Started as another user (a Kubernetes `runAsUser`, `docker run -u`), it trains as that user and first checks
that it can write where training writes, naming the path it cannot.
"""

import os
import pwd
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from compiler.spec.contract import RUN_AS, RUN_AS_USER
from entrypoint.launcher.cluster import Paths

UID_GID = re.compile(r"(?P<uid>[0-9]{1,10}):(?P<gid>[0-9]{1,10})")
HOMES = Path("/home")


class PathError(RuntimeError):
    """A path training writes or reads is not usable by the user it runs as, or that user is not one."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    who: str = "the image's user"
    """Why training runs as this account, for the run's first lines."""

    def __str__(self) -> str:
        return f"{self.name} (uid {self.uid}, {self.who})"


def choose_account(environ: Mapping[str, str], uid_map: Path = Path("/proc/self/uid_map")) -> Account | None:
    """As root: the account training drops to, the launching user named by `RUN_AS` or else the image's;
    None where root cannot become it."""
    value = environ.get(RUN_AS)
    if value is None:
        return find_account(RUN_AS_USER, uid_map)
    match = UID_GID.fullmatch(value)
    if match is None:
        raise PathError(f"{RUN_AS}={value!r} is not a user as uid:gid (numbers, such as 1000:1000)")
    uid, gid = int(match["uid"]), int(match["gid"])
    if not _maps(uid_map, uid) or _remapped_root(uid_map):
        return None  # root here is the launching user already (rootless Docker), or cannot become it
    try:
        entry = pwd.getpwuid(uid)
        name, home = entry.pw_name, entry.pw_dir
    except KeyError:
        name, home = f"uid{uid}", str(HOMES / f"uid{uid}")  # given a passwd entry by `hand_over`
    return Account(name, uid, gid, home, who=f"who launched the run (gid {gid})")


def find_account(name: str, uid_map: Path = Path("/proc/self/uid_map")) -> Account | None:
    """The image's user, where root can become it: not where root is the only user of a user namespace
    (enroot with root remapped, rootless Docker), which could neither chown to it nor switch to it."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if not _maps(uid_map, entry.pw_uid):
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _ranges(uid_map: Path) -> list[tuple[int, int, int]]:
    """The user namespace's uid ranges (inside, outside, count); none where the file is missing."""
    if not uid_map.is_file():
        return []
    return [tuple(map(int, line.split())) for line in uid_map.read_text().splitlines() if line.strip()]


def _maps(uid_map: Path, uid: int) -> bool:
    ranges = _ranges(uid_map)
    return not uid_map.is_file() or any(inside <= uid < inside + count for inside, _, count in ranges)


def _remapped_root(uid_map: Path) -> bool:
    """Root here is another user outside (rootless Docker, enroot), whose files are that user's already."""
    return any(inside == 0 and outside != 0 for inside, outside, _ in _ranges(uid_map))


def register(account: Account, passwd: Path = Path("/etc/passwd")) -> None:
    """As root: a passwd entry and a home for a launching user the image does not know, which Python's
    `getpass`, torch's caches and `setpriv --init-groups` look up."""
    try:
        pwd.getpwuid(account.uid)
        return
    except KeyError:
        pass
    try:
        with passwd.open("a") as entries:
            entries.write(f"{account.name}:x:{account.uid}:{account.gid}:dockyard launcher:{account.home}:/bin/sh\n")
        home = Path(account.home)
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(home, account.uid, account.gid)
    except OSError as error:  # a read-only image
        raise PathError(f"cannot give uid {account.uid} a passwd entry and a home: {error.strerror}") from None


def drop_to(account: Account) -> tuple[str, ...]:
    """The command prefix that runs the rest as `account`, with its groups and no way back to root."""
    return ("setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups", "--no-new-privs", "--")


def written(paths: Paths) -> tuple[Path, ...]:
    """What training writes: the model, checkpoints, and the output folder (data, failure, intermediate)."""
    return (paths.model, paths.checkpoints, paths.output_dir, paths.output, paths.intermediate)


def read(paths: Paths, channels: tuple[str, ...]) -> tuple[Path, ...]:
    """The folders training reads: the contract files' and each channel's (not the data inside)."""
    return (paths.input, paths.config, paths.input / "data", *(paths.channel(name) for name in channels))


def hand_over(
    paths: Paths,
    channels: tuple[str, ...],
    plan: Path,
    account: Account,
    passwd: Path = Path("/etc/passwd"),
    shared: tuple[Path, ...] = (),
) -> None:
    """As root: the account gets a passwd entry where it has none; the written paths (and what is in them,
    such as an earlier attempt's checkpoints) become the account's, and so do the `shared` folders (the token
    cache's, `data.cache`: itself only, not the shards other jobs wrote there); the folders read, the contract
    files and the plan become readable by everyone where the account could not read them."""
    register(account, passwd)
    for folder in shared:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, account.uid, account.gid)
        except OSError as error:
            raise PathError(f"cannot make {folder} writable for {account.name}: {error.strerror}") from None
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
        _allow_others(folder, stat.S_IROTH | stat.S_IXOTH, account)
        if folder == paths.config:
            for file in folder.iterdir():
                _allow_others(file, stat.S_IROTH, account)
    _allow_others(plan.parent, stat.S_IROTH | stat.S_IXOTH, account)
    _allow_others(plan, stat.S_IROTH, account)


def _allow_others(path: Path, bits: int, account: Account) -> None:
    """Add `bits` for others to `path`'s mode, unless the account owns it and its owner bits allow already (a
    launching user's own 0600 checkpoint, mounted read-only)."""
    status = path.stat()
    mode = status.st_mode
    owner_bits = bits << 6  # S_IROTH -> S_IRUSR, S_IXOTH -> S_IXUSR
    if mode & bits == bits or (status.st_uid == account.uid and mode & owner_bits == owner_bits):
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
