"""The compose cache's bases on disk, so a fresh process starts warm: a second `dockyard plan` with the same
group choices skips Hydra's first composition (~0.1 s of defaults tree, YAML loads and OmegaConf nodes),
whatever its plain `key=value` overrides (they are applied to a copy, `compiler.config.cache`).

A file's name is a hash of everything its base was composed from: the Python, Hydra and OmegaConf versions,
the config name, the group choices, the job's name, the config search path, the bytes of every file in its
folders (file:// and pkg://), every ConfigStore entry by name and provider, and the modification time and
size of every module of dockyard and of the installed Hydra plug-ins (the code that stores those entries).
An entry stored without a provider is code this hash does not cover (a user's own `ConfigStore.store`), so
then nothing is read from or written to disk; nor is a base whose primary config adds its own
`hydra.searchpath` (`covers`).

Files are written whole (a rename) and start with a checksum: a file cut short or overwritten is composed
again, so a damaged cache costs time, never a wrong config. The oldest files go past MAX_FILES. The folder,
`$DOCKYARD_HOME/cache/compose` (mode 700), is the user's own, like their bytecode caches: what is there is
unpickled.
"""

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import hydra
import omegaconf
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

import hydra_plugins
from compiler.core.home import cache, keep_newest, write_whole

FORMAT = 1
"""Part of every name: a change to what a file holds makes the old files unreachable."""
MAX_FILES = 64
SUFFIX = ".pickle"
CHECKSUM_BYTES = 16
DOCKYARD_CODE = Path(__file__).resolve().parents[1]


def folder() -> Path:
    return cache("compose")


def name(loader: ConfigLoaderImpl, composition: tuple) -> str | None:
    """The file name of `composition`'s base (config name, choices, job name, search path), or None where the
    hash cannot cover what the composition reads: a ConfigStore entry without a provider, a search path
    element of another kind, a file that cannot be read."""
    digest = hashlib.blake2b(digest_size=20)
    for part in (FORMAT, sys.version, hydra.__version__, omegaconf.__version__, composition):
        digest.update(repr(part).encode())
    entries = _store_entries()
    if entries is None:
        return None
    digest.update(repr(entries).encode())
    for path in _code_files():
        stat = os.stat(path)
        digest.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode())
    for element in loader.config_search_path.get_path():
        root = _config_folder(element.path)
        if root is None and not element.path.startswith("structured://"):
            return None
        for path in _files_under(root) if root else []:
            digest.update(f"{path}\0".encode())
            try:
                digest.update(Path(path).read_bytes())
            except OSError:  # a file Hydra cannot read either: its composition reports it
                return None
    return digest.hexdigest() + SUFFIX


def covers(loader: ConfigLoaderImpl, composed: DictConfig) -> bool:
    """Whether `composed` read only folders of the search path its name hashed (a primary config's own
    `hydra.searchpath` adds folders while it composes; such a base is kept in memory only)."""
    hashed = {element.provider for element in loader.config_search_path.get_path()}
    return all(source.provider in hashed for source in composed.hydra.runtime.config_sources)


def load(file_name: str) -> bytes | None:
    """The base stored under `file_name`, or None (none stored, or its bytes do not match their checksum)."""
    try:
        content = (folder() / file_name).read_bytes()
    except OSError:
        return None
    checksum, base = content[:CHECKSUM_BYTES], content[CHECKSUM_BYTES:]
    return base if checksum == _checksum(base) else None


def save(file_name: str, base: bytes) -> None:
    """Write `base` (a failure to write only costs the next process the composition)."""
    try:
        write_whole(folder() / file_name, _checksum(base) + base)
        keep_newest(folder(), f"*{SUFFIX}", MAX_FILES)
    except OSError:
        return


def _checksum(base: bytes) -> bytes:
    return hashlib.blake2b(base, digest_size=CHECKSUM_BYTES).digest()


def _store_entries() -> list[tuple[str, str]] | None:
    entries: list[tuple[str, str]] = []
    folders = [("", ConfigStore.instance().repo)]
    while folders:
        prefix, repo = folders.pop()
        for key, value in sorted(repo.items()):
            if isinstance(value, dict):
                folders.append((f"{prefix}{key}/", value))
            elif value.provider is None:
                return None
            else:
                entries.append((prefix + key, value.provider))
    return entries


def _code_files() -> list[str]:
    roots = {DOCKYARD_CODE, *(Path(p) for p in hydra_plugins.__path__ if os.path.isdir(p))}
    return [path for root in sorted(roots) for path in _files_under(str(root)) if path.endswith(".py")]


def _config_folder(path: str) -> str | None:
    """A search path element's folder (`pkg://hydra.conf`, `file:///x`, `/x`), or None for another kind."""
    if path.startswith("pkg://"):
        spec = importlib.util.find_spec(path.removeprefix("pkg://"))
        locations = spec.submodule_search_locations if spec else None
        return locations[0] if locations else None
    if path.startswith("file://") or "://" not in path:
        return path.removeprefix("file://")
    return None


def _files_under(root: str) -> list[str]:
    files = []
    for parent, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        files += [os.path.join(parent, name) for name in sorted(names)]
    return files
