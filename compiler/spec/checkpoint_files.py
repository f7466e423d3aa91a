"""The weights a Hugging Face checkpoint folder names, as dockyard reads, mounts and uploads them: the files
its safetensors index lists must be files of the folder itself (a name like `../../etc/passwd` or
`/etc/shadow` would have a node read, or an upload copy, a file outside it), and each must be a regular file
that exists. Links are followed (Hugging Face's cache links a snapshot's files into `../../blobs`); a link to
nothing or one that loops is one line. The planner checks a local folder with `check_folder`; the nodes read
every index through `shard_names`.
"""

import errno
import os
import stat
from pathlib import Path

from compiler.spec import files

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
KEY = "model.path"


def shard_names(index: Path) -> list[str]:
    """The shards a safetensors index names: files in the index's own folder."""
    weight_map = files.read_json_object(index, KEY).get("weight_map")
    shards = set(weight_map.values()) if isinstance(weight_map, dict) else set()
    if not shards or not all(isinstance(s, str) and s and Path(s).name == s and s not in (".", "..") for s in shards):
        raise files.FileError(KEY, index, "has no weight_map of tensor names to shard files beside it")
    return sorted(shards)


def check_folder(folder: Path) -> None:
    """Every entry of a checkpoint folder leads somewhere (no dangling or looping link), and every shard its
    index names is a regular file in it."""
    for entry in sorted(folder.iterdir()):
        _reached(entry)
    index = folder / SAFETENSORS_INDEX
    if not index.exists() and not index.is_symlink():
        return
    for name in shard_names(index):
        if not stat.S_ISREG(_reached(folder / name).st_mode):
            raise files.FileError(KEY, folder / name, f"is not a regular file, and {index.name} names it")


def _reached(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise files.FileError(KEY, path, "is a link to nothing", "point it at an existing file") from None
        raise files.FileError(KEY, path, "does not exist", "give the checkpoint every file its index names") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise files.FileError(KEY, path, "is a link that loops", "point it at an existing file") from None
        raise files.FileError(KEY, path, f"cannot be read ({error.strerror})") from None
