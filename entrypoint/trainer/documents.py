"""Documents and conversations in a data folder, in a fixed order: JSONL (plain, .gz or .zst, streamed
without unpacking to disk), plain text (one document per file), Parquet, and folders a `datasets` Dataset
was saved to with `save_to_disk`.

A record is a JSON object, a Parquet row or a dataset row; `text` reads its `data.field` column, `chat`
its `messages` list of {role, content}.
"""

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from compiler.spec.schema import DataFormat

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT_SUFFIX = ".txt"
PARQUET_SUFFIX = ".parquet"
DATASET_MARKER = "state.json"
"""The file `Dataset.save_to_disk` writes beside its Arrow shards."""


def sources(folder: Path) -> list[Path]:
    """The readable files and saved datasets under `folder` (or `folder` itself if it is one), sorted."""
    if folder.is_file() or (folder / DATASET_MARKER).is_file():
        return [folder]
    datasets = sorted(p.parent for p in folder.rglob(DATASET_MARKER))
    files = [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and _kind(p) is not None and not any(d in p.parents for d in datasets)
    ]
    return sorted([*files, *datasets])


def split_sources(folder: Path, held_out: str | None) -> tuple[list[Path], list[Path]]:
    """The training sources and, when `data.validation` is a path, the held-out ones under it."""
    found = sources(folder)
    if held_out is None:
        return found, []
    validation = folder / held_out
    inside = [p for p in found if p == validation or validation in p.parents]
    return [p for p in found if p not in inside], inside


def records(path: Path, fmt: DataFormat, field: str) -> Iterator[str | list[dict]]:
    """Each record's text (`text`) or messages (`chat`), in file order."""
    column = "messages" if fmt is DataFormat.chat else field
    if _kind(path) == TEXT_SUFFIX:
        if fmt is DataFormat.chat:
            raise ValueError(f"{path}: a .txt file holds text, not conversations (data.format=chat)")
        yield path.read_text()
        return
    for number, row in enumerate(_rows(path, column), 1):
        value = row.get(column)
        wanted = list if fmt is DataFormat.chat else str
        if not isinstance(value, wanted):
            raise ValueError(f"{path}, record {number}: no {wanted.__name__} in its '{column}' field")
        yield value


def content_hash(paths: list[Path], root: Path) -> str:
    """A hash of the sources' names (relative to `root`) and bytes: what the token cache is keyed by."""
    digest = hashlib.blake2b(digest_size=16)
    for path in paths:
        for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode() + b"\0")
            with file.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()


def _kind(path: Path) -> str | None:
    name = path.name
    for suffix in (*JSONL_SUFFIXES, TEXT_SUFFIX, PARQUET_SUFFIX):
        if name.endswith(suffix):
            return suffix
    return None


def _rows(path: Path, column: str) -> Iterator[dict]:
    if path.is_dir():
        import datasets

        yield from datasets.load_from_disk(str(path)).select_columns([column])
        return
    kind = _kind(path)
    if kind == PARQUET_SUFFIX:
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(columns=[column]):
            yield from batch.to_pylist()
        return
    with _text_stream(path, kind) as stream:
        for line in stream:
            if line.strip():
                yield json.loads(line)


def _text_stream(path: Path, kind: str | None) -> TextIO:
    """A JSONL file's lines, decompressed as they are read."""
    if kind == ".jsonl.gz":
        return gzip.open(path, "rt", encoding="utf-8")
    if kind == ".jsonl.zst":
        import zstandard

        return zstandard.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")
