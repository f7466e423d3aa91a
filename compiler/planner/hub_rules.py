"""The rules of `data=hf`: a dataset named (`data.name`) or a mixture of them (`data.mixture`), each mixture
entry well formed, and a dataset in a folder on this machine checked as a data folder is: it holds documents,
and its first record has a row shape the format reads. A Hub id is read by the nodes only.
"""

import itertools
import json
from pathlib import Path

from compiler.core import grammar
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.spec.token_cache_key import sources

MIXTURE_KEYS = ("name", "config", "split", "weight", *schema.RENAMES)
ROW_COLUMNS = ("messages", "tools", "prompt", "completion", "chosen", "rejected", "conversations", "instruction")
MESSAGE_KEYS = ("role", "content")
ROLES = ("system", "user", "assistant", "tool")
SHAPES = {
    schema.DataFormat.chat: (("messages",), ("prompt", "completion"), ("conversations",), ("instruction", "output")),
    schema.DataFormat.preference: (("chosen", "rejected"),),
}
"""The columns of each row shape a format reads (text: `data.field`)."""


def check_hub(data: schema.DataConfig) -> list[Path]:
    """The local folders the datasets are in (each checked), after the names and the mixture."""
    if data.source is not schema.DataSource.hf:
        named = ["name", "mixture", *schema.RENAMES]
        if given := [key for key in named if getattr(data, key)]:
            key = f"data.{given[0]}"
            raise ConfigError(
                key, f"names Hugging Face datasets, and data={data.source.value} reads none", "use data=hf"
            )
        return []
    if bool(data.name) == bool(data.mixture):
        raise ConfigError(
            "data.name",
            "data=hf reads one dataset (data.name) or a mixture (data.mixture)" + (", not both" if data.name else ""),
            "set data.name=HuggingFaceH4/ultrachat_200k (or a folder), or data.mixture=[{name: ..., weight: 0.5}]",
        )
    entries = data.mixture or [
        {"name": data.name, "config": data.config, "split": data.split}
        | {rename: getattr(data, rename) for rename in schema.RENAMES if getattr(data, rename)}
    ]
    return [folder for number, entry in enumerate(entries, 1) if (folder := _entry(data, entry, number)) is not None]


def _entry(data: schema.DataConfig, entry: object, number: int) -> Path | None:
    key = f"data.mixture[{number}]" if data.mixture else "data.name"
    if not isinstance(entry, dict) or not entry.get("name") or set(entry) - set(MIXTURE_KEYS):
        raise ConfigError(
            key,
            f"{grammar.shown(str(entry))} is not a dataset entry",
            f"give {{{', '.join(MIXTURE_KEYS)}}}, name required",
        )
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
        raise ConfigError(
            f"{key}.weight", f"{weight!r} is not a fraction in (0, 1]", "give the share of rows kept, like 0.5"
        )
    for rename, allowed in zip(schema.RENAMES, (ROW_COLUMNS, MESSAGE_KEYS, ROLES), strict=True):
        _check_rename(f"{key if data.mixture else 'data'}.{rename}", entry.get(rename) or {}, allowed)
    folder = Path(str(entry["name"]))
    if not folder.is_absolute():
        return None  # a Hub id, or a name in the nodes' datasets cache
    found = sources(folder) if folder.is_dir() else []
    if not found:
        raise ConfigError(
            key, f"{folder} is not a folder of datasets or JSON/Parquet files", "give a folder load_dataset reads"
        )
    _check_first_record(data, key, found, dict(entry.get("columns") or {}))
    return folder


def _check_rename(key: str, mapping: object, allowed: tuple[str, ...]) -> None:
    """Each renamed name is one the row shapes read, given a name (roles: a list of names) in the data."""
    named = mapping if isinstance(mapping, dict) else {None: None}
    for ours, theirs in named.items():
        names = theirs if key.endswith("roles") and isinstance(theirs, list) else [theirs]
        if ours not in allowed or not names or not all(isinstance(name, str) and name for name in names):
            example = "[human]" if key.endswith("roles") else "a column or key name"
            raise ConfigError(
                key,
                f"{grammar.shown(str(mapping))} does not map {', '.join(allowed)} to the data's names",
                f"give {{{allowed[0]}: {example}}}, keys among {', '.join(allowed)}",
            )


def _check_first_record(data: schema.DataConfig, key: str, found: list[Path], columns: dict) -> None:
    first = next((p for p in found if p.name.endswith((".jsonl", ".jsonl.gz", ".json"))), None)
    if first is None:
        return  # Parquet and saved datasets are read on the nodes only
    import gzip  # only where a local folder's first record is read: other plans start without it

    opener = gzip.open if first.name.endswith(".gz") else open
    with opener(first, "rt", encoding="utf-8") as stream:
        line = next(itertools.islice((line for line in stream if line.strip()), 1), "")
    try:
        row = json.loads(line)
    except ValueError:
        return  # a JSON array, not lines: the node reads it
    if isinstance(row, dict):
        ours = {theirs: mine for mine, theirs in columns.items()}
        row = {ours.get(column, column): value for column, value in row.items()}
    shapes = SHAPES.get(data.format, ((data.field,),))
    if not isinstance(row, dict) or not any(all(column in row for column in shape) for shape in shapes):
        names = " | ".join("+".join(shape) for shape in shapes)
        columns = ", ".join(row) if isinstance(row, dict) else type(row).__name__
        raise ConfigError(
            key,
            f"{first}, record 1 has columns {columns}, no row shape data.format={data.format.value} reads ({names})",
            "give rows of one of those shapes, or another data.format",
        )
