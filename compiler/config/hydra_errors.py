"""Hydra's and OmegaConf's exceptions over a user's config, as dockyard's one-line `ConfigError`s.

Hydra rejects unknown keys, wrong types and unknown options while it composes, with several lines that
name the key somewhere in the middle. `as_config_error` turns those exceptions into the same one-line
`ConfigError` dockyard's own checks raise, so every user mistake reads the same way.
"""

import dataclasses
import difflib
import re
from pathlib import Path

import yaml
from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from compiler.spec.errors import ConfigError, UnknownNameError

CONFIG_NAME = "config"


def as_config_error(exc: BaseException) -> ConfigError:
    """The one-line ConfigError for an exception Hydra or OmegaConf raised over a user's config."""
    if isinstance(exc, ConfigError):
        return exc
    chain = _chain(exc)
    inner = next((e for e in chain if isinstance(e, ConfigError)), None)
    if inner is not None:  # a resolver's: the key is the innermost value being resolved
        keys = [e.full_key for e in chain if isinstance(e, OmegaConfBaseException) and e.full_key]
        return ConfigError(keys[-1], inner.message, inner.fix) if inner.key == "oc.env" and keys else inner
    if isinstance(exc, yaml.YAMLError):
        return _yaml_error(exc)
    if isinstance(exc, OverflowError):  # an integer too large for a float field; OmegaConf appends the key
        key = re.search(r"full_key: (\S+)", str(exc))
        return ConfigError(key[1] if key else "overrides", "is a number too large for a float", "give a smaller number")
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        return UnknownNameError(group or "config", f"{group or 'config'} option", option, exc.options)
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    if isinstance(cause, MissingMandatoryValue):
        key = cause.full_key
        return ConfigError(key, "is missing", f"set it on the command line ({key}=...)")
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        return ConfigError(cause.full_key, _first_line(cause.msg), _nearest_key(cause))
    keyed = next((e for e in chain if isinstance(e, OmegaConfBaseException) and e.full_key), None)
    if keyed is not None:  # raised inside a config file Hydra read (`In 'experiment/mine': ...`)
        where = re.match(r"In '[^']+'", str(exc))
        message = _first_line(keyed.msg)
        return ConfigError(keyed.full_key, f"{where[0]}: {message}" if where else message, _nearest_key(keyed))
    if isinstance(exc, OverrideParseException):
        parse_error = ": ".join(str(exc).splitlines()[:2])
        if exc.override not in parse_error:  # which of the overrides, when Hydra's message does not say
            parse_error = f"{exc.override!r}: {parse_error}"
        return ConfigError(
            "overrides",
            parse_error,
            "quote the value (key='...'), see Hydra's override grammar (`dockyard plan --help`)",
        )
    return ConfigError("overrides", _first_line(str(exc)), "see `dockyard plan --help` for the override syntax")


def _yaml_error(exc: yaml.YAMLError) -> ConfigError:
    """A YAML file that does not parse: named by its config group (the folder it lies in)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return ConfigError("config", f"a YAML file does not parse: {problem}", "fix the file's syntax")
    path = Path(mark.name)
    group = path.parent.name if path.parent.name and path.name != f"{CONFIG_NAME}.yaml" else "config"
    return ConfigError(group, f"{path} line {mark.line + 1}: {problem}", "fix the file's YAML syntax")


def _chain(exc: BaseException | None) -> list[BaseException]:
    """`exc` and the exceptions it was raised from, outermost first (OmegaConf and Hydra wrap them)."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


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
