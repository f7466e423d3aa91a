"""`data=hf`: datasets as recipes name them, read on the nodes through `datasets.load_dataset` (the node's
datasets cache, a local folder of JSON/Parquet files or a folder `save_to_disk` wrote, or the Hub where the node
reaches it). `data.mixture` trains on several at once, each the first `weight` fraction of its split's rows (the
alignment-handbook's and TRL's `dataset_mixture`), in the mixture's order; each row is read in its own shape.
"""

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from compiler.spec.schema import DataConfig
from compiler.spec.token_cache_key import DATASET_MARKER, content_hash

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HubSource:
    name: str
    config: str | None
    split: str
    weight: float = 1.0
    columns: Pairs = ()
    """(the row shape's column, the dataset's) where the dataset names one otherwise (`data.columns`)."""
    message_keys: Pairs = ()
    """(role or content, the messages' key for it) (`data.message_keys`)."""
    roles: Pairs = ()
    """(a name the data gives a role, the role) (`data.roles`)."""

    def __str__(self) -> str:
        subset = f"/{self.config}" if self.config else ""
        return f"{self.name}{subset}[{self.split}]"

    @property
    def renames(self) -> str:
        """What the renames are, for the fingerprint (empty without any)."""
        return (
            repr((self.columns, self.message_keys, self.roles))
            if self.columns or self.message_keys or self.roles
            else ""
        )


def hub_sources(data: DataConfig, split: str | None = None) -> list[HubSource]:
    """The datasets `data.name` or `data.mixture` names, at the training split or at `split`."""
    entries = data.mixture or [
        {"name": data.name, "config": data.config, "split": data.split}
        | {"columns": data.columns, "message_keys": data.message_keys, "roles": data.roles}
    ]
    return [
        HubSource(
            str(entry["name"]),
            entry.get("config"),
            split or str(entry.get("split") or data.split),
            float(entry.get("weight", 1.0)),
            _pairs(entry.get("columns")),
            _pairs(entry.get("message_keys")),
            tuple((str(name), str(role)) for role, names in dict(entry.get("roles") or {}).items() for name in names),
        )
        for entry in entries
    ]


def _pairs(mapping: object) -> Pairs:
    return tuple((str(ours), str(theirs)) for ours, theirs in dict(mapping or {}).items())  # type: ignore[call-overload]


def load(source: HubSource):  # a datasets.Dataset; datasets is imported on the node only
    import datasets

    folder = Path(source.name)
    if (folder / DATASET_MARKER).is_file():
        dataset = datasets.load_from_disk(str(folder))
    elif (folder / source.split / DATASET_MARKER).is_file():  # a DatasetDict saved to disk
        dataset = datasets.load_from_disk(str(folder / source.split))
    else:
        dataset = datasets.load_dataset(source.name, source.config, split=source.split)
    if source.weight < 1:
        dataset = dataset.select(range(int(len(dataset) * source.weight)))
    return dataset


def rows(source: HubSource, columns: tuple[str, ...]) -> Iterator[dict]:
    """The rows' `columns`, named as the row shapes name them (`renamed`)."""
    dataset = load(source)
    theirs = dict(source.columns)
    wanted = {theirs.get(column, column) for column in columns}
    for row in dataset.select_columns([c for c in dataset.column_names if c in wanted]):
        yield renamed(row, source)


def renamed(row: dict, source: HubSource) -> dict:
    """A row with its columns, its messages' keys and their roles named as the row shapes read them."""
    ours = {theirs: mine for mine, theirs in source.columns}
    row = {ours.get(column, column): value for column, value in row.items()}
    if not source.message_keys and not source.roles:
        return row
    keys, roles = {theirs: mine for mine, theirs in source.message_keys}, dict(source.roles)

    def message(value: object) -> object:
        if not isinstance(value, dict):
            return value
        named = {keys.get(key, key): part for key, part in value.items()}
        if isinstance(named.get("role"), str):
            named["role"] = roles.get(named["role"], named["role"])
        return named

    return {
        column: [message(item) for item in value] if isinstance(value, list) else message(value)
        for column, value in row.items()
    }


def fingerprint(sources: list[HubSource]) -> str:
    """What the sources hold: a local folder's names and bytes, otherwise the fingerprint `datasets` gives the
    loaded split (which changes with the dataset's revision and files), with each name, split and weight."""
    digest = hashlib.blake2b(digest_size=16)
    for source in sources:
        folder = Path(source.name)
        held = content_hash([folder], folder) if folder.is_dir() else load(source)._fingerprint
        digest.update(f"{source}\0{source.weight}\0{held}\0{source.renames}".encode())
    return digest.hexdigest()
