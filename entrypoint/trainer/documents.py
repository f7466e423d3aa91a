"""Documents and conversations in a data folder, in a fixed order: JSONL (plain, .gz or .zst, streamed
without unpacking to disk), plain text (one document per file), Parquet, and folders a `datasets` Dataset
was saved to with `save_to_disk`.

A record is a JSON object, a Parquet row or a dataset row; `text` reads its `data.field` column, `chat` a
conversation: `messages` (a list of {role, content}, with an optional `tools` list) or `prompt` and
`completion` (both strings, or both message lists); `preference` a pair: `prompt`, `chosen` and `rejected`.
"""

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from compiler.spec.schema import DataFormat
from compiler.spec.token_cache_key import PARQUET_SUFFIX, TEXT_SUFFIX, kind, sources, split_sources

__all__ = ["records", "sources", "split_sources"]

CHAT_COLUMNS = ("messages", "tools", "prompt", "completion")
PAIR_COLUMNS = ("prompt", "chosen", "rejected", "tools")


def records(path: Path, fmt: DataFormat, field: str) -> Iterator[str | dict]:
    """Each record's text (`text`), conversation (`chat`: a dict of its CHAT_COLUMNS) or pair (`preference`: a
    dict of its PAIR_COLUMNS), in file order."""
    if kind(path) == TEXT_SUFFIX:
        if fmt.rendered:
            raise ValueError(f"{path}: a .txt file holds text, not records (data.format={fmt.value})")
        yield path.read_text()
        return
    columns = {DataFormat.chat: CHAT_COLUMNS, DataFormat.preference: PAIR_COLUMNS}.get(fmt, (field,))
    for number, row in enumerate(_rows(path, columns), 1):
        if fmt is DataFormat.chat:
            yield _conversation(row, f"{path}, record {number}")
            continue
        if fmt is DataFormat.preference:
            yield _pair(row, f"{path}, record {number}")
            continue
        value = row.get(field)
        if not isinstance(value, str):
            raise ValueError(f"{path}, record {number}: no str in its '{field}' field")
        yield value


def _conversation(row: dict, where: str) -> dict:
    """The record's conversation columns, with the shapes checked (None is a column this row leaves empty)."""
    found = {name: row[name] for name in CHAT_COLUMNS if row.get(name) is not None}
    if isinstance(found.get("messages"), list):
        return {name: found[name] for name in ("messages", "tools") if name in found}
    prompt, completion = found.get("prompt"), found.get("completion")
    if isinstance(prompt, str | list) and type(prompt) is type(completion):
        return {name: found[name] for name in ("prompt", "completion", "tools") if name in found}
    raise ValueError(
        f"{where}: no conversation: a 'messages' list, or 'prompt' and 'completion' (both text or both lists)"
    )


def _pair(row: dict, where: str) -> dict:
    """The record's prompt, chosen and rejected completions (and tools), all text or all message lists."""
    found = {name: row[name] for name in PAIR_COLUMNS if row.get(name) is not None}
    prompt, chosen, rejected = (found.get(name) for name in PAIR_COLUMNS[:3])
    if isinstance(prompt, str | list) and type(prompt) is type(chosen) is type(rejected):
        return found
    raise ValueError(f"{where}: no preference pair: 'prompt', 'chosen' and 'rejected', all text or all message lists")


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[dict]:
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
