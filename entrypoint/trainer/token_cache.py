"""Tokenize once, reuse: documents become one token stream per split (training, validation), written to a
folder keyed by a hash of the data's content, the tokenizer's files and the options that change the tokens.
A second run, a restarted job or another run on the same data finds the folder and never loads the
tokenizer; every rank reads the arrays memory-mapped.

Each split holds `tokens.npy` (uint32: every document followed by the end-of-text token), `targets.npy`
(uint8: 1 where a token is a training target — all of them for text and `loss_on=all`, the assistant's
replies for chat) and `starts.npy` (each document's first position, and the stream's end). `meta.json`
holds the counts the trainer reports.

The `tokenizers` library encodes a batch of documents on all the node's cores (`encode_batch`, in Rust).
"""

import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.token_cache_key import META_FILE
from compiler.spec.tokenizer import TOKENIZER_FILE, TokenizerFacts
from entrypoint.trainer import documents

BATCH_DOCUMENTS = 1024
PROGRESS_EVERY_S = 5.0
SPLITS = ("train", "validation")


class Encoder:
    """Documents → (token ids, target flags) with a Hugging Face tokenizer's `tokenizer.json`."""

    def __init__(self, folder: Path, fmt: DataFormat, loss_on: LossOn) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        self.facts = TokenizerFacts.read(folder)
        self.format, self.loss_on = fmt, loss_on
        self.template = _compiled(self.facts.chat_template) if fmt is DataFormat.chat else None

    def encode(self, batch: list) -> list[tuple[np.ndarray, np.ndarray]]:
        if self.template is None:
            encodings = self.tokenizer.encode_batch(batch)
            return [(np.asarray(e.ids, dtype=np.uint32), np.ones(len(e.ids), dtype=np.uint8)) for e in encodings]
        rendered = [self._render(messages) for messages in batch]
        encodings = self.tokenizer.encode_batch([text for text, _ in rendered], add_special_tokens=False)
        return [self._chat_targets(e, spans) for e, (_, spans) in zip(encodings, rendered, strict=True)]

    def _render(self, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text and the character spans of the assistant's replies: each reply's text up to
        the next message, found by rendering the conversation one message longer at a time."""
        text, spans, previous = "", [], ""
        for index, message in enumerate(messages):
            text = self._apply(messages[: index + 1])
            if message.get("role") == "assistant" and text.startswith(previous):
                found = text.find(str(message.get("content", "")), len(previous))
                spans.append((found if found >= 0 else len(previous), len(text)))
            previous = text
        return text, spans

    def _apply(self, messages: list[dict]) -> str:
        special = {"bos_token": self.facts.bos_token or "", "eos_token": self.facts.eos_token or ""}
        return self.template.render(messages=messages, add_generation_prompt=False, **special)

    def _chat_targets(self, encoding, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(encoding.ids, dtype=np.uint32)
        if self.loss_on is LossOn.all:
            return ids, np.ones(len(ids), dtype=np.uint8)
        starts = np.asarray([start for start, _ in encoding.offsets] or [0])[: len(ids)]
        targets = np.zeros(len(ids), dtype=np.uint8)
        for begin, end in spans:
            targets |= ((starts >= begin) & (starts < end)).astype(np.uint8)
        return ids, targets


def _compiled(template: str | None):
    """The chat template in a sandbox, as transformers renders it (jinja2 comes with torch)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template or "")


@dataclass
class SplitCounts:
    documents: int = 0
    tokens: int = 0
    targets: int = 0


@dataclass
class CacheMeta:
    key: str
    splits: dict[str, SplitCounts] = field(default_factory=dict)
    tokenize_s: float = 0.0

    @classmethod
    def read(cls, folder: Path) -> "CacheMeta":
        raw = json.loads((folder / META_FILE).read_text())
        return cls(raw["key"], {k: SplitCounts(**v) for k, v in raw["splits"].items()}, raw["tokenize_s"])


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
    eos = np.asarray([encoder.facts.eos_id], dtype=np.uint32)
    for split, batch in split_documents():
        counts = meta.splits.setdefault(split, SplitCounts())
        for ids, targets in encoder.encode(batch):
            eos_target = targets[-1:] if len(targets) else np.ones(1, dtype=np.uint8)
            parts[split].append((np.concatenate([ids, eos]), np.concatenate([targets, eos_target])))
            counts.documents, counts.tokens, counts.targets = (
                counts.documents + 1,
                counts.tokens + len(ids),
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


def batches(splits: dict[str, list[Path]], plan: Plan, fraction: float | None) -> Iterator[tuple[str, list]]:
    """(split, documents) in batches, in order; with a `fraction`, each document drawn into validation with
    that probability from a generator seeded by `trainer.seed` (the same documents on every node)."""
    draw = np.random.default_rng(plan.trainer.seed)
    for split, paths in splits.items():
        batch: list = []
        for path in paths:
            for record in documents.records(path, plan.data.format, plan.data.field):
                batch.append(record)
                if len(batch) == BATCH_DOCUMENTS:
                    yield from _drawn(split, batch, draw, fraction)
                    batch = []
        if batch:
            yield from _drawn(split, batch, draw, fraction)


def _drawn(split: str, batch: list, draw: np.random.Generator, fraction: float | None) -> Iterator[tuple[str, list]]:
    if fraction is None or split != "train":
        yield split, batch
        return
    held = draw.random(len(batch)) < fraction
    yield "train", [doc for doc, out in zip(batch, held, strict=True) if not out]
    yield "validation", [doc for doc, out in zip(batch, held, strict=True) if out]
