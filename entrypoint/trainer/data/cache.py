"""Tokenize once, reuse: documents become one token stream per split (training, validation), written to a
folder keyed by a hash of the data's content, the tokenizer's files and the options that change the tokens.
A second run, a restarted job or another run on the same data finds the folder and never loads the
tokenizer; every rank reads the arrays memory-mapped.

Each split holds `tokens.npy` (uint32: every document followed by the end-of-text token), `targets.npy`
(uint8: 1 where a token is a training target — all of them for text and `loss_on=all`, the assistant's
replies for chat) and `starts.npy` (each document's first position, and the stream's end). `meta.json`
holds the counts the trainer reports.

Each format encodes a batch of documents at once (text: the `tokenizers` library's `encode_batch`, in Rust, on
all the node's cores).
"""

import itertools
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from datetime import date
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.token_cache_key import META_FILE
from compiler.spec.tokenizer import TokenizerFacts
from entrypoint.trainer.data import data_format, documents
from entrypoint.trainer.data.base import Batch, CacheMeta, Encoded, SplitCounts

BATCH_DOCUMENTS = 1024
PROGRESS_EVERY_S = 5.0
SPLITS = ("train", "validation")


class Encoder:
    """Documents → token ids and target flags, as the data's format encodes them (`FORMATS`), with the end-of-text
    token the tokenizer's files name."""

    def __init__(self, folder: Path, fmt: DataFormat, loss_on: LossOn, today: date | None = None) -> None:
        self.facts = TokenizerFacts.read(folder)
        self.encoder = data_format(fmt).encoder(folder, loss_on, today or date.today())

    def encode(self, batch: Batch) -> list[Encoded]:
        """`batch` holds (where the record is, for errors: "file, record n"; the record)."""
        return self.encoder(batch)


def build(
    folder: Path,
    key: str,
    encoder: Encoder,
    split_documents: Callable[[], Iterable[tuple[str, list]]],
    progress: Callable[[str], None],
) -> CacheMeta:
    """Tokenize `split_documents` ((split, batch of documents) in order) into `folder`/`key`, written beside
    it and moved into place whole: a folder that exists is complete. Another node that finished first wins."""
    target, partial = folder / key, folder / f".{key}.{uuid.uuid4().hex}.partial"  # nodes may share the folder
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {split: [] for split in SPLITS}
    meta, started, shown = CacheMeta(key), time.perf_counter(), time.perf_counter()
    for split, batch in split_documents():
        counts = meta.splits.setdefault(split, SplitCounts())
        for encoded in encoder.encode(batch):
            ids, targets = _with_eos(encoded, encoder.facts.eos_id)
            parts[split].append((ids, targets))
            counts.documents, counts.tokens, counts.targets = (
                counts.documents + 1,
                counts.tokens + len(ids) - 1,
                counts.targets + int(targets.sum()),
            )
        if time.perf_counter() - shown > PROGRESS_EVERY_S:
            shown = time.perf_counter()
            progress(_progress_line(meta, shown - started))
    meta.tokenize_s = round(time.perf_counter() - started, 3)
    progress(_progress_line(meta, meta.tokenize_s))
    partial.mkdir(parents=True)
    for split, docs in parts.items():
        _write_split(partial / split, docs)
    (partial / META_FILE).write_text(json.dumps(asdict(meta)))
    try:
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial)  # another writer's folder is in place, with the same contents
    return meta


def _with_eos(encoded: Encoded, eos: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A document followed by the end-of-text token, which separates documents in the stream: appended unless the
    rendering already ends with it, and a target where the document does not end its last turn itself (text; a
    chat template without an end-of-turn marker). A rendering that ends with it keeps that token's own flag too:
    where the template's end-of-turn marker is the eos (Llama 3, Mistral v0.3) it is the last reply's stop token,
    a target; after Phi's `<|end|>` it is none."""
    ids, targets = encoded.ids, encoded.targets
    if len(ids) and ids[-1] == eos:
        return ids, np.concatenate([targets[:-1], [targets[-1] | int(encoded.eos_target)]]).astype(np.uint8)
    return (
        np.concatenate([ids, np.asarray([eos], dtype=np.uint32)]),
        np.concatenate([targets, [int(encoded.eos_target)]]).astype(np.uint8),
    )


def _write_split(folder: Path, docs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    folder.mkdir()
    lengths = np.asarray([len(ids) for ids, _ in docs], dtype=np.int64)
    np.save(folder / "starts.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    np.save(folder / "tokens.npy", np.concatenate([ids for ids, _ in docs] or [np.zeros(0, np.uint32)]))
    np.save(folder / "targets.npy", np.concatenate([t for _, t in docs] or [np.zeros(0, np.uint8)]))


def _progress_line(meta: CacheMeta, seconds: float) -> str:
    docs = sum(c.documents for c in meta.splits.values())
    tokens = sum(c.tokens for c in meta.splits.values())
    rate = tokens / max(seconds, 1e-9)
    return f"tokenizing        {docs:,} documents, {tokens:,} tokens, {seconds:.1f} s ({rate:,.0f} tokens/s)"


def batches(splits: dict[str, list], plan: Plan) -> Iterator[tuple[str, list]]:
    """(split, documents) in batches, in order, the training documents `held_out` moved to validation."""
    flags = _held_flags(splits, plan)
    for split, paths in splits.items():
        batch: list = []
        for path in paths:
            for number, record in enumerate(documents.records(path, plan.data.format, plan.data.field), 1):
                batch.append((f"{path}, record {number}", record))
                if len(batch) == BATCH_DOCUMENTS:
                    yield from _drawn(split, batch, flags)
                    batch = []
        if batch:
            yield from _drawn(split, batch, flags)


def held_out(plan: Plan, count: int) -> np.ndarray | None:
    """Which of `count` training documents the validation split draws, seeded by `trainer.seed` (the same on every
    node): each with the probability `data.validation` (a fraction), or `data.validation` of them (a row count, as
    datasets' `train_test_split(test_size=n)` takes one) drawn without replacement; None when none are drawn."""
    held, draw = plan.data.validation, np.random.default_rng(plan.trainer.seed)
    if isinstance(held, float):
        return draw.random(count) < held
    if not _row_count(held):
        return None
    if held >= count:
        raise ValueError(f"data.validation={held} rows: the training split has {count:,}; hold out fewer rows")
    mask = np.zeros(count, dtype=bool)
    mask[draw.choice(count, held, replace=False)] = True
    return mask


def _held_flags(splits: dict[str, list], plan: Plan) -> Iterator[bool] | None:
    """`held_out`'s flags, one per training document in order: a fraction's drawn as the documents stream (the
    same draws), a row count's once the training documents are counted."""
    if isinstance(plan.data.validation, float):
        draw, fraction = np.random.default_rng(plan.trainer.seed), plan.data.validation
        return (bool(flag) for _ in itertools.count() for flag in draw.random(BATCH_DOCUMENTS) < fraction)
    if not _row_count(plan.data.validation):
        return None  # held out whole (a path, a split) or not at all: no training document is drawn, none counted
    count = sum(1 for path in splits["train"] for _ in documents.records(path, plan.data.format, plan.data.field))
    return (bool(flag) for flag in held_out(plan, count))


def _row_count(validation: object) -> bool:
    """Whether `data.validation` is a number of rows (an int, not a bool)."""
    return isinstance(validation, int) and not isinstance(validation, bool)


def _drawn(split: str, batch: list, flags: Iterator[bool] | None) -> Iterator[tuple[str, list]]:
    if flags is None or split != "train":
        yield split, batch
        return
    held = list(itertools.islice(flags, len(batch)))
    yield "train", [doc for doc, out in zip(batch, held, strict=True) if not out]
    yield "validation", [doc for doc, out in zip(batch, held, strict=True) if out]
