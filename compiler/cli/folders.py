"""Run folders no two commands share, and results that appear only when a command succeeds.

Hydra names a run folder by the second, so two commands started together would share one. The default
`hydra.run.dir` and `hydra.sweep.dir` therefore go through the `dockyard.fresh_dir` resolver: the first resolution in an
invocation creates a new folder with `os.mkdir` (adding `-1`, `-2`... to a name that exists), and every
later one returns that folder. A folder the user names (`hydra.run.dir=.`) may hold files already: there a
command writes into a staging folder of its own (Hydra's `.hydra` too, see `STAGING_OVERRIDE`) and moves
its results into place with `os.replace` once it succeeds. On an error, only what this invocation created
is removed, and a file it did not create is never touched.
"""

import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from itertools import count
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from compiler.config import cache
from compiler.config.compose import CONFIG_NAME, NAME_MAX
from compiler.config.hydra_errors import as_config_error
from compiler.core.grammar import check_name
from compiler.spec.errors import ConfigError

RESOLVER = "dockyard.fresh_dir"
HYDRA_SUBDIR = ".hydra"
OUTPUT_SUBDIR = "hydra.output_subdir"
SWEEP_RECORD = "multirun.yaml"
"""What Hydra writes into a sweep folder before any point runs."""


class Invocation:
    """What this invocation created: its staging folder's name, and the fresh run folder with the parents
    it had to create (outermost first), so that an error can take back exactly those."""

    def __init__(self) -> None:
        self.staging = f".dockyard-{uuid.uuid4().hex}"
        self.fresh: dict[str, Path] = {}
        """The fresh folder made under each root (the run folder under `outputs`, a sweep's under `multirun`)."""
        self.created: list[Path] = []
        self.expected: tuple[Path, frozenset[str]] | None = None
        """A run folder the user named: the deepest folder on its way that existed, and what that held."""
        self.results: list[Path] = []
        """Files moved into the run folder that were not there before (a launch that then fails removes them)."""


_current = Invocation()


def start() -> Invocation:
    """A new invocation (every `dockyard VERB`, also when tests call it in-process)."""
    global _current
    _current = Invocation()
    return _current


def staging_override() -> str:
    """The override that makes Hydra write its `.hydra` files into this invocation's staging folder, given to
    the compose cache as parsed: a new word every command, it would cost Hydra's parser ~5 ms."""
    folder = f"{_current.staging}/{HYDRA_SUBDIR}"
    word = f"{OUTPUT_SUBDIR}={folder}"
    cache.remember(word, Override(OverrideType.CHANGE, OUTPUT_SUBDIR, ValueType.ELEMENT, folder, input_line=word))
    return word


def fresh_dir(root: str, name_key: str, stamp: str, *, _root_: DictConfig) -> str:
    """The resolver: `root/<name>/stamp`, a folder this invocation created, the same on every resolution
    (a sweep resolves its folder again for every point). It reads the name itself (`name_key`), so that a
    mistake there is reported as the name's."""
    if root not in _current.fresh:
        try:
            name = _root_[name_key]
        except OmegaConfBaseException as error:
            raise as_config_error(error) from None
        check_name(name)
        wanted = Path(root, name, stamp)
        try:
            for parent in reversed([p for p in wanted.parents if not p.exists()]):
                os.mkdir(parent)  # a concurrent command may make it first: then it is not ours to remove
                _current.created.append(parent)
            folder = _mkdir_new(wanted)
        except (FileExistsError, FileNotFoundError):  # a concurrent command made or removed a parent
            return fresh_dir(root, name_key, stamp, _root_=_root_)
        except OSError as error:
            raise cannot_create("hydra.run.dir", wanted, error) from None
        _current.created.append(folder)
        _current.fresh[root] = folder.resolve()
    return str(_current.fresh[root])


def _mkdir_new(wanted: Path) -> Path:
    for n in count():
        folder = wanted if n == 0 else wanted.with_name(f"{wanted.name}-{n}")
        try:
            os.mkdir(folder)
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


PATH_MAX = 4096
"""Linux's limit on a path, in bytes with its closing NUL."""
FOLDER_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
MADE_BY_HYDRA = (*FOLDER_KEYS, OUTPUT_SUBDIR, "hydra.sweep.subdir")
"""The folders Hydra makes itself; a subfolder given as an absolute path is made there, not in the run's."""


def check_folder(key: str, folder: str) -> None:
    """A run or sweep folder the user names must be one the file system can hold: Hydra would otherwise fail
    to create it with an OSError (ENAMETOOLONG), after the plan was made."""
    path = Path(folder).absolute()
    longest = max(path.parts, key=lambda part: len(part.encode()))
    if len(longest.encode()) > NAME_MAX:
        message = f"has a part of {len(longest.encode())} bytes, and a file name is at most {NAME_MAX}"
        raise ConfigError(key, message, "name a shorter folder")
    if len(str(path).encode()) >= PATH_MAX:
        message = f"is {len(str(path).encode())} bytes as an absolute path, and a path is at most {PATH_MAX - 1}"
        raise ConfigError(key, message, "name a shorter folder")


def expect(run_dir: str) -> None:
    """A run folder the user names, as its value reads before Hydra resolves it (`out-${name}`): what the
    deepest folder on its way that exists holds now, so that `claim` can tell the folders Hydra then makes."""
    start = _made_at(run_dir)
    base = next(p for p in [start, *start.parents] if p.is_dir())
    _current.expected = (base.resolve(), frozenset(os.listdir(base)))


def _made_at(folder: str) -> Path:
    """Where a folder the user names is made, as far as its value says before Hydra resolves it: the folder
    itself, or the one its first interpolation is made in (`out-${name}/a`: `.`)."""
    literal, interpolated, _ = folder.partition("${")
    return Path(literal) if not interpolated or literal.endswith("/") else Path(literal).parent


def cannot_create(key: str, folder: Path, error: OSError) -> ConfigError:
    reason = "a file is there" if isinstance(error, FileExistsError) else error.strerror
    return ConfigError(key, f"cannot create '{folder}': {reason}", "name a folder you can write")


def creation_error(key: str, folder: str, error: OSError) -> ConfigError | None:
    """Hydra's failure to make the folder the user named as `key` (`folder`, as given: a file on its way, a
    folder this user cannot write, a read-only or pseudo file system) as that key's error; None for an
    OSError about any other path, which is not the user's to fix."""
    if error.filename is None:
        return None
    failed, start = Path(os.fsdecode(error.filename)).absolute(), _made_at(folder).absolute()
    if failed != start and failed not in start.parents and start not in failed.parents:
        return None
    return cannot_create(key, failed, error)


def configured(overrides: Sequence[str], config_dirs: Sequence[Path], multirun: bool) -> dict[str, str]:
    """The run or sweep folder as the user's config files name it (`hydra: run: dir: ...`), as written:
    the command is composed again, without its sweep, only to tell which folder Hydra failed to make.
    Empty where the folder is dockyard's default (made by `fresh_dir`, which reports its own errors) or the
    command does not compose this way (a primary config of the user's own)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    *users, dockyards = config_dirs
    searchpath = [f"hydra.searchpath=[{','.join(f'file://{folder}' for folder in users)}]"] if users else []
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        single = [o.input_line for o in parsed if not o.is_sweep_override()]
        with initialize_config_dir(str(dockyards), version_base="1.3"):
            cfg = compose(CONFIG_NAME, overrides=[*single, *searchpath], return_hydra_config=True)
        parent, _, leaf = key.rpartition(".")
        written = str(OmegaConf.to_container(OmegaConf.select(cfg, parent), resolve=False)[leaf])
    except (HydraException, OmegaConfBaseException):
        return {}
    return {} if RESOLVER in written else {key: written}


def claim(run_dir: Path) -> None:
    """Hydra made the run folder `run_dir` (resolved, absolute): the folders on its way that were not there
    at `expect` are this invocation's, to remove if they stay empty."""
    if _current.expected is None:
        return
    base, held = _current.expected
    if base not in run_dir.parents:
        return
    parts = run_dir.relative_to(base).parts
    if parts[0] not in held:
        _current.created += [base.joinpath(*parts[: n + 1]) for n in range(len(parts))]


def register() -> None:
    OmegaConf.register_new_resolver(RESOLVER, fresh_dir, replace=True)


@contextmanager
def results_in(run_dir: Path, *, keep: bool = True) -> Iterator[Path]:
    """The folder a task writes into. On success its files move into `run_dir` (`keep`) or are dropped (a
    dry run); on any exception everything this invocation created is removed and the exception goes on."""
    stage = run_dir / _current.staging
    stage.mkdir(exist_ok=True)
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        discard()
        raise
    if keep:
        _promote(stage, run_dir)
    shutil.rmtree(stage, ignore_errors=True)
    discard()


def discard_point(run_dir: Path, output_subdir: str | None) -> None:
    """A point of a sweep that ended in the user's error, under a sweep folder this invocation made: the
    config files Hydra wrote for it, and its folder if that leaves it empty."""
    run_dir = run_dir.resolve()
    if not any(fresh in run_dir.parents for fresh in _current.fresh.values()):
        return
    if output_subdir is not None and run_dir in (run_dir / output_subdir).resolve().parents:
        shutil.rmtree(run_dir / output_subdir, ignore_errors=True)
    with suppress(OSError):  # it holds what the point wrote before its error
        run_dir.rmdir()


def discard(*, results_too: bool = False) -> None:
    """Remove the folders this invocation created that nothing else was written into. With `results_too`
    (a launch that failed after its results moved into place) also its results: the fresh run folder
    whatever it holds (no other command writes there), and in a folder the user named the files it added
    (a file it replaced keeps the new version: the old one is gone)."""
    for fresh in _current.fresh.values():
        shutil.rmtree(fresh / _current.staging, ignore_errors=True)
        if results_too or _holds_only(fresh, SWEEP_RECORD):  # a sweep none of whose points left anything
            shutil.rmtree(fresh, ignore_errors=True)
    if results_too:
        for path in _current.results:
            path.unlink(missing_ok=True)
    for folder in reversed(_current.created):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            continue


def _holds_only(folder: Path, name: str) -> bool:
    return folder.is_dir() and [path.name for path in folder.iterdir()] == [name]


def _promote(stage: Path, run_dir: Path) -> None:
    """Move every file of `stage` to the same place under `run_dir`, each with one atomic `os.replace`."""
    for source in sorted(stage.rglob("*")):
        if source.is_file():
            target = run_dir / source.relative_to(stage)
            _current.created += reversed([p for p in target.parents if not p.exists()])
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                _current.results.append(target)
            os.replace(source, target)
    shutil.rmtree(stage)
