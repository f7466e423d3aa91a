"""Each file's sha256 for the image tag, large files' kept under `$DOCKYARD_HOME/cache/sha256`: the cpu-local
image's context holds the ~180 MB torch wheel, and reading it took ~0.15 s of every build, launch and dry run.

A kept digest is named by a hash of the file's path, device, inode, size, modification time and change time.
A write to a file sets its change time (ctime) to the present, and no tool sets it back (`touch -d` and
`os.utime` set the other times, and set the ctime to the present too), so an edited file is hashed again.
A file changed in the last RACY_S seconds is hashed and not kept, since two writes within one tick of the
file system's clock can leave the same times. Files under MIN_BYTES are read each time.
"""

import hashlib
import time
from pathlib import Path

from compiler.core.home import cache, keep_newest, write_whole

MIN_BYTES = 1 << 20
RACY_S = 2
MAX_ENTRIES = 256


def folder() -> Path:
    return cache("sha256")


def file_sha256(path: Path) -> str:
    stat = path.stat()
    if stat.st_size < MIN_BYTES or time.time_ns() - stat.st_ctime_ns < RACY_S * 10**9:
        return _read(path)
    identity = f"{path.resolve()}\0{stat.st_dev}\0{stat.st_ino}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ctime_ns}"
    entry = folder() / hashlib.blake2b(identity.encode(), digest_size=20).hexdigest()
    try:
        return entry.read_text()
    except OSError:
        digest = _read(path)
    try:
        write_whole(entry, digest.encode())
        keep_newest(entry.parent, "[0-9a-f]*", MAX_ENTRIES)
    except OSError:  # only the next command pays the read again
        pass
    return digest


def _read(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
