"""Documents and conversations in a data folder, in a fixed order: JSONL (plain, .gz or .zst, streamed
without unpacking to disk), plain text (one document per file), Parquet, and folders a `datasets` Dataset
was saved to with `save_to_disk`.

A record is a JSON object, a Parquet row or a dataset row; `text` reads its `data.field` column, `chat`
its `messages` list of {role, content}.
"""

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from compiler.spec.schema import DataFormat
from compiler.spec.token_cache_key import PARQUET_SUFFIX, TEXT_SUFFIX, kind, sources, split_sources

__all__ = ["records", "sources", "split_sources"]


def records(path: Path, fmt: DataFormat, field: str) -> Iterator[str | list[dict]]:
    """Each record's text (`text`) or messages (`chat`), in file order."""
    column = "messages" if fmt is DataFormat.chat else field
    if kind(path) == TEXT_SUFFIX:
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


def _rows(path: Path, column: str) -> Iterator[dict]:
    if path.is_dir():
        import datasets

        yield from datasets.load_from_disk(str(path)).select_columns([column])
        return
    suffix = kind(path)
    if suffix == PARQUET_SUFFIX:
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(columns=[column]):
            yield from batch.to_pylist()
        return
    with _text_stream(path, suffix) as stream:
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
