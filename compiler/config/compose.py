"""From Hydra's composed config to the typed `Config`, with the checks Hydra does not make.

Hydra's own errors become one-line `ConfigError`s in `compiler.config.hydra_errors`.

Two rules hold for every value, whatever its key:
- The environment is not read into a config (`${oc.env:...}` is refused): plans, reports, requests and
  run records are stored and shared, so a secret copied into one leaks. Credentials reach a job through
  the target's own mechanism (an IAM role, the engine's credential chain), never through the config.
- Numbers are finite and fit in 64 bits: NaN and infinity cannot be trained with or submitted, and strict
  JSON (plan.json) has no spelling for them.
"""

import dataclasses
import difflib
import functools
import math
import os
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

import yaml
from antlr4 import CommonTokenStream, InputStream
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import ConfigCompositionException, OverrideParseException
from hydra.grammar.gen.OverrideLexer import OverrideLexer
from hydra.grammar.gen.OverrideParser import OverrideParser
from omegaconf import DictConfig, OmegaConf
from omegaconf._utils import get_yaml_loader
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from compiler.config import cache, interpolations, store
from compiler.config.hydra_errors import CONFIG_NAME, as_config_error
from compiler.spec import schema
from compiler.spec.errors import ConfigError, shown

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

store.register()
store.store_lazily()
cache.install()
interpolations.install()
MAX_INT = 2**63 - 1
GLOBAL_PACKAGE = re.compile(r"^#\s*@package\s+_global_\s*$", re.MULTILINE)


def _refuse_environment(variable: str, default: object = None) -> None:
    raise ConfigError(
        "oc.env",
        f"reads the environment variable {variable}, and plans and requests are stored and shared",
        "write the value itself; pass credentials through the target (an IAM role), never the config",
    )


OmegaConf.register_new_resolver("oc.env", _refuse_environment, replace=True)


def to_config(cfg: DictConfig) -> schema.Config:
    """The typed config, every interpolation resolved; a missing value or an added key is a ConfigError."""
    try:
        if not OmegaConf.is_missing(cfg, "model") and OmegaConf.select(cfg, "model.family") == "hf":  # ~model
            from compiler.config import eval_adapter, pretrained  # a checkpoint's readers: only a model=hf plan

            eval_adapter.on_base(cfg)
            pretrained.fill_from_checkpoint(cfg.model)
        try:
            _reject_added_keys(cfg)
            config = OmegaConf.to_object(cfg)
        except MissingMandatoryValue:  # named as the first missing key, found only then (a walk of every value)
            missing = sorted(OmegaConf.missing_keys(cfg))
            raise ConfigError(missing[0], "is missing", f"set it on the command line ({missing[0]}=...)") from None
    except OmegaConfBaseException as exc:
        raise as_config_error(exc) from None
    _reject_unrepresentable_numbers(config)
    _reject_scalars_for_collections(config)
    return config


def _reject_scalars_for_collections(value: object, key: str = "") -> None:
    """An interpolation resolves after OmegaConf's type checks: `image.python_packages=${trainer.steps}` gives
    a list field an int. Every list and map field must hold a list or a map."""
    if not dataclasses.is_dataclass(value):
        return
    for name, origins in _field_origins(type(value)):
        item, full_key = getattr(value, name), f"{key}{name}"
        for collection, wanted, example in ((list, "a list", "[]"), (dict, "a map", "{}")):
            if collection in origins and item is not None and not isinstance(item, collection):
                raise ConfigError(full_key, f"is {item!r}, not {wanted}", f"give {wanted}, e.g. {full_key}={example}")
        for child in item.values() if isinstance(item, dict) else [item]:
            _reject_scalars_for_collections(child, f"{full_key}.")


@functools.cache
def _field_origins(cls: type) -> list[tuple[str, frozenset]]:
    """Each field of a schema class with the generic types its hint allows (`list` for `list[str] | None`)."""
    hints = _type_hints(cls)
    fields = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        fields.append(
            (field.name, frozenset(typing.get_origin(h) for h in (typing.get_args(hint) if union else [hint])))
        )
    return fields


def _reject_unrepresentable_numbers(value: object, key: str = "") -> None:
    """NaN, infinity and integers past 64 bits, in any field, list or map of the config."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"is {value}, not a finite number", "give a finite number")
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        raise ConfigError(key, f"has {len(str(abs(value)))} digits, more than 64 bits hold", "give a smaller number")
    prefix = f"{key}." if key else ""
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            _reject_unrepresentable_numbers(getattr(value, field.name), prefix + field.name)
    elif isinstance(value, dict):
        for name, item in value.items():
            _reject_unrepresentable_numbers(item, f"{prefix}{name}")
    elif isinstance(value, list | tuple):
        for item in value:
            _reject_unrepresentable_numbers(item, key)


def _reject_added_keys(node: DictConfig, path: str = "") -> None:
    """Keys added with `+key=value` to a schema node would be dropped silently; refuse them instead."""
    node_type = OmegaConf.get_type(node)
    known = _field_names(node_type) if dataclasses.is_dataclass(node_type) else None
    for key in node:
        full_key = f"{path}{key}"
        if known is not None and key not in known:
            nearest = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            fix = f"did you mean {path}{nearest[0]}?" if nearest else "remove it"
            raise ConfigError(full_key, f"is not a key of {node_type.__name__}", fix)
        child = node._get_node(key, validate_access=False)  # a key of the node's own: nothing to validate
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _reject_added_keys(child, f"{full_key}.")


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


def compose_config(overrides: Sequence[str] = (), config_dir: Path = CONF_DIR) -> schema.Config:
    """Compose like the CLI does, in-process (tests, benchmarks, the sweep launcher)."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        return compose_in_context(overrides)


def compose_in_context(overrides: Sequence[str]) -> schema.Config:
    """Compose inside an already initialized Hydra context (many configs, one initialization)."""
    check_overrides(overrides)
    try:
        cfg = compose(CONFIG_NAME, overrides=open_maps(overrides))
    except (ConfigCompositionException, OverrideParseException, ValueError, OverflowError, yaml.YAMLError) as exc:
        raise as_config_error(exc) from None
    return to_config(cfg)


NAME_MAX = 255
"""Linux's limit on one file name, in bytes. Hydra looks each override's key up as a config group, a folder
of that name, and a longer key ends in ENAMETOOLONG (an OSError) in the middle of composing."""


MAP_VALUE = re.compile(r"=\s*\{")


def open_maps(overrides: Sequence[str]) -> list[str]:
    """`target.labels={team: ml}`: a map field (labels, annotations, environment, hyperparameters) takes any
    keys, but Hydra merges a map given for it in struct mode, which refuses every key the default lacks. Such
    an override is given to Hydra as `++` (merge, adding keys); a word that does not parse is left as it is."""
    opened = []
    for word in overrides:
        try:
            maybe = MAP_VALUE.search(word) and not word.startswith("-")  # parse only what may give a map
            override = OverridesParser.create().parse_overrides([word])[0] if maybe else None
        except OverrideParseException:
            override = None
        plain = override is not None and override.type is OverrideType.CHANGE and not override.is_sweep_override()
        if plain and isinstance(override.value(), dict) and _is_map_field(override.key_or_group.split(".")):
            word = f"++{word}"
        opened.append(word)
    return opened


def _is_map_field(path: list[str]) -> bool:
    return any(
        typing.get_origin(_type_hints(cls).get(path[-1])) is dict
        for cls in _classes_holding(path)
        if dataclasses.is_dataclass(cls)
    )


def check_overrides(overrides: Sequence[str]) -> None:
    """What Hydra would not say in one line: keys too long to look up, floats given for text fields."""
    for override in overrides:
        key = override.partition("=")[0].lstrip("+~")
        if len(key.encode()) > NAME_MAX:
            raise ConfigError(key, f"is {len(key.encode())} bytes long, and a key is at most {NAME_MAX}", "shorten it")
    reject_numbers_for_strings(overrides)
    for override in overrides:
        if "{" in override:
            _reject_duplicate_keys(override)


def _reject_duplicate_keys(override: str) -> None:
    """`hardware.groups={a: {...}, a: {...}}`: Hydra's parser keeps the last of two equal keys in a map and
    drops the other without a word (a YAML file's duplicate is an error already); read from its parse tree."""
    lexer = OverrideLexer(InputStream(override))
    lexer.removeErrorListeners()  # Hydra reports what does not parse, in one line
    parser = OverrideParser(CommonTokenStream(lexer))
    parser.removeErrorListeners()
    tree = parser.override()
    if parser.getNumberOfSyntaxErrors():
        return  # Hydra reports it
    key = override.partition("=")[0].lstrip("+~")
    nodes = [tree]
    while nodes:
        node = nodes.pop()
        if isinstance(node, OverrideParser.DictContainerContext):
            names = [pair.dictKey().getText() for pair in node.dictKeyValuePair()]
            twice = next((name for name in names if names.count(name) > 1), None)
            if twice is not None:
                raise ConfigError(f"{key}.{twice}", "is given twice in one map, and Hydra would keep only the last",
                                  "give each key once")  # fmt: skip
        nodes += list(node.getChildren()) if hasattr(node, "getChildren") else []


def reject_numbers_for_strings(overrides: Sequence[str]) -> None:
    """`image.torch=2.10` would arrive as the float 2.1 and `name=1e3` as '1000.0': a float given for a
    string field (versions, names, environment values) is refused with the quoting that keeps it. A yes/no
    field takes true or false only: OmegaConf would read `2`, `1` or `yes` as true."""
    try:
        parsed = [cache.parse_once(word) for word in overrides]  # the composition reads them again
    except OverrideParseException:
        return  # Hydra reports it while composing
    for override in parsed:
        if override.is_delete() or override.is_sweep_override():
            continue
        types, value = _field_types(override.key_or_group.split(".")), override.value()
        if bool in types and str not in types and value is not None and not isinstance(value, bool):
            key = override.key_or_group.lstrip("+~")
            raise ConfigError(key, f"is true or false, not {shown(value)}", f"write {key}=true or false")
        if isinstance(value, float) and str in types:
            raw = override.input_line.partition("=")[2]
            raise ConfigError(
                override.key_or_group,
                f"is a text field, but {raw} reads as the number {override.value()}",
                f"quote it: {override.key_or_group.lstrip('+~')}='{raw}'",
            )


def reject_numbers_in_files(hydra_cfg: DictConfig, cfg: DictConfig) -> None:
    """The same rule for the YAML files the composition read (`torch: 2.10` in a config folder's
    `image/x.yaml`): each chosen option's file, and the primary config, found as Hydra found them.
    `image=auto` reads its family's file through an entry Hydra does not list among the choices."""
    folders = [Path(s.path) for s in hydra_cfg.runtime.config_sources if s.schema == "file"]
    choices = OmegaConf.to_container(hydra_cfg.runtime.choices, resolve=True)  # one walk, not one lookup a key
    assert isinstance(choices, dict)
    chosen = [(f"{group}/{option}", group) for group, option in choices.items()]
    if choices.get("image") == "auto":
        chosen.append((f"image/{schema.ImageFamily(cfg.image.family).value.replace('_', '-')}", "image"))
    for name, group in [(hydra_cfg.job.config_name, ""), *chosen]:
        if name is None or group.startswith("hydra/"):
            continue
        for folder in folders:
            path = os.path.join(folder, f"{name}.yaml")
            try:
                stat = os.stat(path)
            except OSError:
                continue
            if S_ISREG(stat.st_mode):
                _reject_numbers_in_file(path, stat.st_mtime_ns, stat.st_size, group)
                break


@functools.lru_cache(maxsize=512)
def _reject_numbers_in_file(name: str, mtime_ns: int, size: int, group: str) -> None:
    """One file's check, done once per version of the file (every point of a sweep reads the same files)."""
    path = Path(name)
    text = path.read_text()
    package = "" if GLOBAL_PACKAGE.search(text) else group.replace("/", ".")
    values = yaml.load(text, Loader=_values_loader())  # what OmegaConf.create(text) holds, without its nodes
    _reject_floats_for_strings(values, package, path)


@functools.cache
def _values_loader() -> type:
    """OmegaConf's YAML resolvers (its floats, no timestamps) on libyaml's parser where PyYAML has it: the same
    values in a tenth of the time, and no compiling of the pure-Python reader's patterns on every command.
    (OmegaConf's own loader also refuses duplicate keys, which Hydra's composition has already reported.)"""
    loader = get_yaml_loader()
    if not yaml.__with_libyaml__:
        return loader
    return type("ValuesLoader", (yaml.CSafeLoader,), {"yaml_implicit_resolvers": loader.yaml_implicit_resolvers})


def _reject_floats_for_strings(value: object, key: str, path: Path) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            if key or name not in ("defaults", "hydra"):
                _reject_floats_for_strings(item, f"{key}.{name}" if key else str(name), path)
    elif isinstance(value, float) and str in _field_types(key.split(".")):
        raise ConfigError(
            key,
            f"is a text field, but {path} gives the number {value} (YAML reads 2.10 as 2.1)",
            f"quote it in that file: {key.rpartition('.')[2]}: '...'",
        )


def _field_types(path: list[str]) -> set[type]:
    """The types a dotted config key may hold (several below `target`, whose schema the option picks)."""
    types: set[type] = set()
    for cls in _classes_holding(path):
        hint = _type_hints(cls).get(path[-1]) if dataclasses.is_dataclass(cls) else cls
        types.update(typing.get_args(hint) or (hint,))
    return types


def _classes_holding(path: list[str]) -> list[type]:
    """The schema classes (or a map's value type) that may hold the last key of a dotted path."""
    classes: list[type] = [schema.Config]
    for name in path[:-1]:
        next_classes = []
        for cls in classes:
            hint = _type_hints(cls).get(name) if dataclasses.is_dataclass(cls) else None
            if hint is Any and name == "target":
                next_classes += [cls for cls in _subclasses(schema.TargetConfig)]
            elif dataclasses.is_dataclass(hint):
                next_classes.append(hint)
            elif typing.get_origin(hint) is dict:
                next_classes.append(typing.get_args(hint)[1])
        classes = next_classes
    return classes


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """A schema class's field types (`typing.get_type_hints` evaluates every annotation again on each call)."""
    return typing.get_type_hints(cls)


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


MAX_YAML_NODES = 100_000
"""Far more values than any config holds; a file whose aliases expand past it is an alias bomb (a few lines
that OmegaConf would expand into billions of nodes, which hangs Hydra while it composes)."""


def reject_alias_bombs(folder: Path) -> None:
    """Every YAML file of a config folder the user gives (`-cd`, `-cp`), counted as OmegaConf would expand it.
    PyYAML's composer keeps an alias as a reference to its anchor's node, so the count is quick."""
    for path in sorted(folder.rglob("*.yaml")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue  # not a config group (a virtual environment, git's folder)
        group = path.parent.name if path.parent != folder else "config"
        try:
            root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
            size = 0.0 if root is None else _expanded_size(root, {})
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            continue  # Hydra reports a file it cannot read when it reads it
        except RecursionError:
            raise ConfigError(group, f"{path} nests its values too deep to read", "flatten it") from None
        if size > MAX_YAML_NODES:
            raise ConfigError(
                group,
                f"{path} expands its aliases to more than {MAX_YAML_NODES:,} values",
                "write the values out, or use fewer aliases of aliases",
            )


def _expanded_size(node: yaml.Node, sizes: dict[int, float]) -> float:
    """Nodes under `node` with every alias expanded (infinite for an alias of itself)."""
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = math.inf  # seen again before it is counted: a recursive alias
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    size = 1.0
    for child in children:
        size += _expanded_size(child, sizes)
        if size > MAX_YAML_NODES:
            break
    sizes[id(node)] = size
    return size
