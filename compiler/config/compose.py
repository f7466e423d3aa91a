"""From Hydra's composed config to the typed `Config`, and Hydra's own errors as `ConfigError`s.

Hydra rejects unknown keys, wrong types and unknown options while it composes, with several lines that
name the key somewhere in the middle. `as_config_error` turns those exceptions into the same one-line
`ConfigError` dockyard's own checks raise, so every user mistake reads the same way.
"""

import dataclasses
import difflib
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from compiler.config import store
from compiler.spec import schema
from compiler.spec.errors import ConfigError, UnknownNameError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
CONFIG_NAME = "config"

store.register()


def to_config(cfg: DictConfig) -> schema.Config:
    """The typed config, every interpolation resolved; a missing value or an added key is a ConfigError."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(missing[0], "is missing", f"set it on the command line ({missing[0]}=...)")
    _reject_added_keys(cfg)
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise as_config_error(exc) from None


def _reject_added_keys(node: DictConfig, path: str = "") -> None:
    """Keys added with `+key=value` to a schema node would be dropped silently; refuse them instead."""
    node_type = OmegaConf.get_type(node)
    known = {f.name for f in dataclasses.fields(node_type)} if dataclasses.is_dataclass(node_type) else None
    for key in node:
        full_key = f"{path}{key}"
        if known is not None and key not in known:
            nearest = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            fix = f"did you mean {path}{nearest[0]}?" if nearest else "remove it"
            raise ConfigError(full_key, f"is not a key of {node_type.__name__}", fix)
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _reject_added_keys(child, f"{full_key}.")


def compose_config(overrides: Sequence[str] = (), config_dir: Path = CONF_DIR) -> schema.Config:
    """Compose like the CLI does, in-process (tests, benchmarks, the sweep launcher)."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        return compose_in_context(overrides)


def compose_in_context(overrides: Sequence[str]) -> schema.Config:
    """Compose inside an already initialized Hydra context (many configs, one initialization)."""
    try:
        cfg = compose(CONFIG_NAME, overrides=list(overrides))
    except (ConfigCompositionException, OverrideParseException, ValueError) as exc:
        raise as_config_error(exc) from None
    return to_config(cfg)


def as_config_error(exc: BaseException) -> ConfigError:
    """The one-line ConfigError for an exception Hydra or OmegaConf raised over a user's config."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        return UnknownNameError(group or "config", f"{group or 'config'} option", option, exc.options)
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    if isinstance(cause, MissingMandatoryValue):
        key = cause.full_key
        return ConfigError(key, "is missing", f"set it on the command line ({key}=...)")
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        return ConfigError(cause.full_key, _first_line(cause.msg), _nearest_key(cause))
    if isinstance(exc, OverrideParseException):
        parse_error = ": ".join(str(exc).splitlines()[:2])
        return ConfigError("overrides", parse_error, "see Hydra's override grammar (`dockyard plan --help`)")
    return ConfigError("overrides", _first_line(str(exc)), "see `dockyard plan --help` for the override syntax")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].rstrip(".")


def _nearest_key(error: OmegaConfBaseException) -> str:
    """'did you mean parallelism.tp?' for an unknown key, from the schema's own field names."""
    if not isinstance(error, ConfigKeyError | ConfigAttributeError):
        return ""
    if not dataclasses.is_dataclass(error.object_type):
        return ""
    parent, _, name = error.full_key.rpartition(".")
    known = [f.name for f in dataclasses.fields(error.object_type)]
    nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    prefix = f"{parent}." if parent else ""
    return f"did you mean {prefix}{nearest[0]}?" if nearest else f"known keys: {', '.join(known)}"
