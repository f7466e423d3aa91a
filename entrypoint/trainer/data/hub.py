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


@dataclass(frozen=True)
class HubSource:
    name: str
    config: str | None
    split: str
    weight: float = 1.0

    def __str__(self) -> str:
        subset = f"/{self.config}" if self.config else ""
        return f"{self.name}{subset}[{self.split}]"


def hub_sources(data: DataConfig, split: str | None = None) -> list[HubSource]:
    """The datasets `data.name` or `data.mixture` names, at the training split or at `split`."""
    entries = data.mixture or [{"name": data.name, "config": data.config, "split": data.split}]
    return [
        HubSource(
            str(entry["name"]),
            entry.get("config"),
            split or str(entry.get("split") or data.split),
            float(entry.get("weight", 1.0)),
        )
        for entry in entries
    ]


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
    dataset = load(source)
    yield from dataset.select_columns([c for c in columns if c in dataset.column_names])


def fingerprint(sources: list[HubSource]) -> str:
    """What the sources hold: a local folder's names and bytes, otherwise the fingerprint `datasets` gives the
    loaded split (which changes with the dataset's revision and files), with each name, split and weight."""
    digest = hashlib.blake2b(digest_size=16)
    for source in sources:
        folder = Path(source.name)
        held = content_hash([folder], folder) if folder.is_dir() else load(source)._fingerprint
        digest.update(f"{source}\0{source.weight}\0{held}\0".encode())
    return digest.hexdigest()
