"""Compose once: what Hydra composes that does not depend on a command's plain `key=value` overrides is
composed once per process and copied for every later config.

Hydra composes in two steps: the defaults list (the config-group choices) decides which files are read and
merged, then the plain overrides are applied to the merged config in their order. The first step is nearly
all of the cost (~0.1 s); the second is a few milliseconds. `install()` wraps Hydra's
`ConfigLoaderImpl.load_configuration`, the one function every composition goes through (`hydra.main`,
which composes twice per command: once to read `hydra.mode`, once to run; `hydra.compose`; the launchers'
`load_sweep_config`, so every sweep point and every Optuna trial), so the CLI, the sweep launcher and the
sweepers share one cache. The first step's result is kept per distinct set of group choices and the second
is run with Hydra's own code on a copy, then the `hydra` node's per-command fields are filled as Hydra
fills them (its override lists, `override_dirname`, `runtime.cwd`, `env_set`, version). Tests check the
result equals Hydra's own composition.

A composition the cache cannot reproduce exactly goes to Hydra unchanged: sweep overrides (`a=1,2`),
a `hydra.searchpath` override, a config that copies environment variables (`hydra.job.env_copy`), and
any composition that fails (so the error is Hydra's own). A cached base is dropped when a file of the
config folders or an entry of the ConfigStore changes. Bases are also kept on disk (`compiler.config.stored`),
so a fresh process, each `dockyard plan`, finds the base an earlier command composed.
"""

import collections
import contextlib
import functools
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

from hydra import version
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobRuntime
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from compiler.config import stored

MAX_BASES = 64
"""Distinct sets of group choices kept (an Optuna search over models and strategies stays well below)."""
MAX_WORDS = 4096
"""Override words kept parsed (`parse_once`)."""

_hydra_load = ConfigLoaderImpl.load_configuration
_bases: collections.OrderedDict[tuple, bytes] = collections.OrderedDict()
"""Each base pickled: unpickling makes a fresh copy in a third of the time `copy.deepcopy` takes."""
_enabled = True
_fixed: dict[Any, Any] | None = None
"""Within `inputs_fixed`: the fingerprints and group lookups, each computed once."""
_words: dict[str, Override] = {}


def install() -> None:
    """Route every Hydra composition in this process through the cache (idempotent)."""
    ConfigLoaderImpl.load_configuration = _load_configuration  # type: ignore[method-assign]


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Hydra's own composition, uncached (the benchmarks' baselines)."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


@contextlib.contextmanager
def inputs_fixed() -> Iterator[None]:
    """Within, the config files and the ConfigStore are taken as they were when first read: a sweep's batch is
    prepared from one state of them, and each point skips fingerprinting them (~0.3 ms) and looking up which of
    its words choose a group. Processes forked within inherit what was read."""
    global _fixed
    previous, _fixed = _fixed, {}
    try:
        yield
    finally:
        _fixed = previous


def _once(key: Any, compute: Callable[[], Any]) -> Any:
    """`compute()`, or within `inputs_fixed` its first result for `key`."""
    if _fixed is None:
        return compute()
    if key not in _fixed:
        _fixed[key] = compute()
    return _fixed[key]


def cached_bases() -> int:
    return len(_bases)


def clear() -> None:
    _bases.clear()


def _load_configuration(
    self: ConfigLoaderImpl,
    config_name: str | None,
    overrides: list[str],
    run_mode: RunMode,
    from_shell: bool = True,
    validate_sweep_overrides: bool = True,
) -> DictConfig:
    def hydras_own() -> DictConfig:
        return _hydra_load(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    if not _enabled:
        return hydras_own()
    try:
        parsed = [parse_once(word) for word in overrides]
        if not _cacheable(parsed):
            return hydras_own()
        if validate_sweep_overrides:
            self.validate_sweep_overrides_legal(overrides=parsed, run_mode=run_mode, from_shell=from_shell)
        choices, plain = _split(self, parsed)
        base = _base(self, config_name, [o.input_line for o in choices])
        if base is None:
            return hydras_own()
        return _with_plain_overrides(base, parsed, plain)
    except Exception:  # whatever the cache's path raises, Hydra's own composition raises (or succeeds)
        return hydras_own()


def warm(loader: ConfigLoaderImpl, config_name: str | None, points: list[list[str]]) -> None:
    """Compose the base of every distinct set of group choices among `points` now (up to MAX_BASES), so that
    processes forked afterwards find them cached (`compiler.sweep.parallel`). A point the cache would hand
    to Hydra, or that fails, is left to compose as it would."""
    seen: set[tuple[str, ...]] = set()
    for overrides in points:
        try:
            parsed = [parse_once(word) for word in overrides]
            choices = tuple(o.input_line for o in _split(loader, parsed)[0])
            if _cacheable(parsed) and choices not in seen and len(seen) < MAX_BASES:
                seen.add(choices)
                _base(loader, config_name, list(choices))
        except Exception:  # reported when the point itself is composed
            continue


def parse_once(word: str) -> Override:
    """One override parsed once per process (a sweep's points repeat the same words; parsing is ~0.1 ms
    each, and a process's first words several ms). Hydra reads an Override and never changes it."""
    override = _words.get(word)
    if override is None:
        override = OverridesParser.create().parse_overrides([word])[0]
        remember(word, override)
    return override


def remember(word: str, override: Override) -> None:
    """`override` is what `word` parses to: a word dockyard writes itself is taken from here, never parsed."""
    if len(_words) >= MAX_WORDS:
        _words.clear()
    _words[word] = override


def _cacheable(parsed: list[Override]) -> bool:
    return not any(o.is_sweep_override() or o.get_key_element() == "hydra.searchpath" for o in parsed)


def _split(loader: ConfigLoaderImpl, parsed: list[Override]) -> tuple[list[Override], list[Override]]:
    """The overrides that choose a group, and the plain ones, each in its order."""
    choices: list[Override] = []
    plain: list[Override] = []
    for o in parsed:
        chooses = _once((id(loader), o.input_line), functools.partial(_chooses_a_group, loader, o))
        (choices if chooses else plain).append(o)
    return choices, plain


def _chooses_a_group(loader: ConfigLoaderImpl, override: Override) -> bool:
    """As Hydra's defaults list sorts overrides: a group's name without a dict value picks an option."""
    if override.package is not None:
        return True
    return not isinstance(override.value(), dict) and loader.repository.group_exists(override.key_or_group)


def _base(loader: ConfigLoaderImpl, config_name: str | None, choices: list[str]) -> bytes | None:
    """The composition of `choices` alone, from the cache or from Hydra (None: not cacheable)."""
    key = (
        config_name,
        tuple(choices),
        JobRuntime().get("name"),
        tuple((p.provider, p.path) for p in loader.config_search_path.get_path()),
        _once("store", _store_fingerprint),
        _once(id(loader), functools.partial(_files_fingerprint, loader)),
    )
    base = _bases.get(key)
    if base is None:
        file_name = stored.name(loader, key[:4])
        base = stored.load(file_name) if file_name else None
        if base is None:
            composed = _hydra_load(loader, config_name, choices, RunMode.RUN, validate_sweep_overrides=False)
            if composed.hydra.job.env_copy:  # values read from the environment at compose time
                return None
            base = pickle.dumps(composed)
            if file_name and stored.covers(loader, composed):
                stored.save(file_name, base)
        _bases[key] = base
        if len(_bases) > MAX_BASES:
            _bases.popitem(last=False)
    _bases.move_to_end(key)
    return base


def _with_plain_overrides(base: bytes, parsed: list[Override], plain: list[Override]) -> DictConfig:
    """A copy of `base` with `plain` applied and the `hydra` node filled as Hydra's `load_configuration` fills it."""
    cfg = pickle.loads(base)
    ConfigLoaderImpl._apply_overrides_to_config(plain, cfg)
    task = [o for o in parsed if not o.is_hydra_override()]
    hydra = cfg.hydra
    with open_dict(hydra):
        hydra.overrides.hydra = [o.input_line for o in parsed if o.is_hydra_override()]
        hydra.overrides.task = [o.input_line for o in task]
        job = hydra.job
        for key in job.env_copy:
            job.env_set[key] = os.environ[key]
        hydra.runtime.version_base = version.getbase()
        hydra.runtime.cwd = os.getcwd()
        dirname = job.config.override_dirname
        job.override_dirname = get_overrides_dirname(
            overrides=task, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys
        )
    return cfg


def _store_fingerprint() -> tuple[int, ...]:
    """Changes when an entry is stored in Hydra's ConfigStore (a plug-in or a test registering a schema)."""

    def count(repo: dict[str, Any]) -> int:
        return sum(count(v) if isinstance(v, dict) else 1 for v in repo.values())

    return (count(ConfigStore.instance().repo),)


def _files_fingerprint(loader: ConfigLoaderImpl) -> tuple[tuple[str, int, int], ...]:
    """Every file of the config folders with its modification time and size: an edit drops the bases."""
    files = []
    for element in loader.config_search_path.get_path():
        if element.path and (element.path.startswith("file://") or "://" not in element.path):
            root = element.path.removeprefix("file://")
            for folder, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(folder, name)
                    stat = os.stat(path)
                    files.append((path, stat.st_mtime_ns, stat.st_size))
    return tuple(files)
