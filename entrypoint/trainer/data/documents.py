"""Documents and conversations in a data folder, in a fixed order: JSONL (plain, .gz or .zst, streamed
without unpacking to disk), plain text (one document per file), Parquet, and folders a `datasets` Dataset
was saved to with `save_to_disk`; with `data=hf`, the datasets `load_dataset` reads (`hub.HubSource`).

A record is a JSON object, a Parquet row or a dataset row, read by its format (`FORMATS`): `text` its
`data.field` column, `chat` a conversation, `preference` a pair.
"""

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from compiler.spec.schema import DataFormat
from compiler.spec.token_cache_key import PARQUET_SUFFIX, TEXT_SUFFIX, kind, sources, split_sources
from entrypoint.trainer.data import data_format, hub

__all__ = ["records", "sources", "split_sources"]


def records(path: Path | hub.HubSource, fmt: DataFormat, field: str) -> Iterator[str | dict]:
    """Each record, in file order, as its format reads it (`text`: its text; `chat`: a conversation;
    `preference`: a pair)."""
    if isinstance(path, Path) and kind(path) == TEXT_SUFFIX:
        if fmt.rendered:
            raise ValueError(f"{path}: a .txt file holds text, not records (data.format={fmt.value})")
        yield path.read_text()
        return
    shape = data_format(fmt)
    for number, row in enumerate(_rows(path, shape.columns(field)), 1):
        yield shape.record(row, field, f"{path}, record {number}")


def _rows(path: Path | hub.HubSource, columns: tuple[str, ...]) -> Iterator[dict]:
    if isinstance(path, hub.HubSource):
        yield from hub.rows(path, columns)
        return
    if path.is_dir():
        import datasets

        dataset = datasets.load_from_disk(str(path))
        yield from dataset.select_columns([c for c in columns if c in dataset.column_names])
        return
    suffix = kind(path)
    if suffix == PARQUET_SUFFIX:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        for batch in table.iter_batches(columns=[c for c in columns if c in table.schema_arrow.names]):
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


def lines_between(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a plain JSONL file that begin in its bytes [start, end), each with the byte it begins
    at: a line that begins before `start` is the previous range's, so ranges that tile a file read each line once."""
    with path.open("rb") as stream:
        stream.seek(max(start - 1, 0))
        offset = start
        if start > 0 and stream.read(1) != b"\n":
            offset += len(stream.readline())
        while offset < end and (line := stream.readline()):
            if line.strip():
                yield offset, line
            offset += len(line)


def record(line: bytes, fmt: DataFormat, field: str, where: str) -> str | dict:
    """A JSONL line's record, as its format reads it."""
    return data_format(fmt).record(json.loads(line), field, where)
