"""`data.format=text|chat`: the tokenizer's folder, the token cache (built by each node's first rank when it is
missing, reused otherwise) and the windows every rank reads from it, with the lines the run reports.

Packing (`data.packing=true`) cuts the stream of documents, each followed by the end-of-text token, into
consecutive windows of seq_len + 1 tokens (with `data.packing_mask`, each token's position in its document
goes with it, so that attention stays inside documents); without packing each document has a window of its
own, padded with end-of-text tokens that are no targets and truncated (counted) when it is longer.
"""

import time
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from compiler.spec import Plan
from compiler.spec.contract import TOKENIZER_CHANNEL
from compiler.spec.s3 import download_s3
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.token_cache_key import TOKEN_CACHE_DIR, cache_key
from compiler.spec.tokenizer import TokenizerFacts, tokenizer_location
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer import documents, token_cache
from entrypoint.trainer.data import Pairs, ShuffledWindows

POLL_S = 1.0
MIN_TARGET_SHARE = 0.01
"""The least share of a chat split's tokens that must be targets with `data.loss_on=assistant`."""


class TargetsError(ValueError):
    """A chat split with no or too few target tokens."""


class PackedDocuments(ShuffledWindows):
    def __init__(self, split: Path, seq_len: int, seed: int, mask_boundaries: bool = False) -> None:
        self.tokens = np.load(split / "tokens.npy", mmap_mode="r")
        self.targets = np.load(split / "targets.npy", mmap_mode="r")
        self.starts = np.load(split / "starts.npy") if mask_boundaries else None
        super().__init__((len(self.tokens) - 1) // seq_len, seq_len, seed)

    def window(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start = index * self.seq_len
        end = start + self.seq_len + 1
        return self.tokens[start:end], self.targets[start:end]

    def positions(self, index: int) -> np.ndarray | None:
        """With `data.packing_mask`: each token's distance from its document's first token or from the window's
        start, whichever is nearer (the cache's `starts` are the document boundaries)."""
        if self.starts is None:
            return None
        start = index * self.seq_len
        slots = np.arange(start, start + self.seq_len + 1)
        first = self.starts[np.searchsorted(self.starts, slots, side="right") - 1]
        return slots - np.maximum(first, start)


class SeparateDocuments(ShuffledWindows):
    def __init__(self, split: Path, seq_len: int, seed: int, eos: int) -> None:
        self.tokens = np.load(split / "tokens.npy", mmap_mode="r")
        self.targets = np.load(split / "targets.npy", mmap_mode="r")
        self.starts = np.load(split / "starts.npy")
        self.eos = eos
        super().__init__(len(self.starts) - 1, seq_len, seed)

    def window(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start = int(self.starts[index])
        end = min(int(self.starts[index + 1]), start + self.seq_len + 1)
        pad = self.seq_len + 1 - (end - start)
        tokens = np.concatenate([self.tokens[start:end], np.full(pad, self.eos, dtype=self.tokens.dtype)])
        return tokens, np.concatenate([self.targets[start:end], np.zeros(pad, dtype=np.uint8)])


class PreferencePairs(SeparateDocuments):
    """The pairs of a preference split (documents 2i and 2i + 1: the prompt with the chosen completion, then with
    the rejected one), each completion in a window of its own, cut at the end when longer (the prompt kept
    first, as TRL's `truncation_mode=keep_start`). A micro batch of m pairs is 2m rows: the chosen ones, then
    the rejected ones in the same order."""

    def __init__(self, split: Path, seq_len: int, seed: int, eos: int) -> None:
        super().__init__(split, seq_len, seed, eos)
        self.windows //= 2

    def __call__(self, indices: torch.Tensor) -> Pairs:
        return self.pairs([self.shuffled(index) for index in indices.tolist()])

    def pairs(self, numbers: list[int]) -> Pairs:
        return self.rows([2 * pair for pair in numbers] + [2 * pair + 1 for pair in numbers])

    def every_pair(self, rank: int, ranks: int, micro: int) -> Iterator[Pairs]:
        """Every pair once over all `ranks`, this rank's share in micro batches of up to `micro` pairs, as many
        on every rank (sharded models run their forward passes together): a rank with fewer repeats a pair."""
        mine = list(range(rank, self.windows, ranks)) or [0]
        for start in range(0, -(-self.windows // ranks), micro):
            yield self.pairs(mine[start : start + micro] or mine[:1])


def tokenizer_folder(plan: Plan, paths: Paths, leader: bool) -> Path:
    """The tokenizer's files on this node: the mounted channel, the plan's folder, or an S3 prefix downloaded
    by the node's first rank (every rank calls this, then waits at a barrier) and checked as the planner
    checks a local one."""
    location = tokenizer_location(plan.data, plan.model)
    channel = paths.channel(TOKENIZER_CHANNEL)
    if channel.is_dir() and any(channel.iterdir()):
        return channel
    if location is None or not location.startswith("s3://"):
        return Path(location or channel)
    folder = cache_root(plan, paths) / "tokenizer"
    if leader and not folder.is_dir():
        download_s3(location, folder)
    dist.barrier()
    facts = TokenizerFacts.read(folder)
    if facts.vocab > plan.model.vocab:
        raise ValueError(f"data.tokenizer: its {facts.vocab} token ids exceed model.vocab={plan.model.vocab}")
    if facts.eos_id is None or (plan.data.format is DataFormat.chat and not facts.chat_template):
        raise ValueError(f"data.tokenizer: {location} lacks an eos_token or, for chat, a chat template")
    return folder


def cache_root(plan: Plan, paths: Paths) -> Path:
    return Path(plan.data.cache) if plan.data.cache else paths.checkpoints / TOKEN_CACHE_DIR


def ensure_cache(
    plan: Plan, data_folder: Path, tokenizer: Path, root: Path, leader: bool, log: Callable[[str], None]
) -> Path:
    """The cache folder of this data; built here by the node's first rank if missing, which the node's other
    ranks wait for by watching the folder appear (a barrier would time out on a large corpus; torchrun ends
    them if the first rank fails). The key is computed by rank 0 and broadcast, so the data is hashed once."""
    held_out = plan.data.validation if isinstance(plan.data.validation, str) else None
    train, validation = documents.split_sources(data_folder, held_out)
    if not train:
        raise FileNotFoundError(f"no documents (.jsonl[.gz|.zst], .txt, .parquet, datasets) under {data_folder}")
    keys = [cache_key(plan, tokenizer, data_folder, train, validation) if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(keys, src=0)
    folder = root / keys[0]
    if leader and not folder.is_dir():
        log(f"token cache       building {folder}")
        root.mkdir(parents=True, exist_ok=True)
        today = date.fromisoformat(plan.chat_date) if plan.chat_date else None
        encoder = token_cache.Encoder(tokenizer, plan.data.format, plan.data.loss_on, today)
        fraction = plan.data.validation if isinstance(plan.data.validation, float) else None
        splits = {"train": train, "validation": validation}
        token_cache.build(root, keys[0], encoder, lambda: token_cache.batches(splits, plan, fraction), log)
    elif leader:
        log(f"token cache       reused {folder} (no tokenization)")
    while not folder.is_dir():  # the node's first rank is tokenizing: longer than a collective's timeout may allow
        time.sleep(POLL_S)
    dist.barrier()
    return folder


def open_windows(plan: Plan, folder: Path, eos: int) -> tuple[ShuffledWindows, ShuffledWindows | None, list[str]]:
    """The training windows, the validation windows (None without `data.validation`) and the lines that say
    what the run reads and how well it fills its windows."""
    meta = token_cache.CacheMeta.read(folder)
    seq_len, seed, packing = plan.model.seq_len, plan.trainer.seed, plan.data.packing

    def split(name: str) -> ShuffledWindows:
        if plan.data.format is DataFormat.preference:
            return PreferencePairs(folder / name, seq_len, seed, eos)
        if packing:
            return PackedDocuments(folder / name, seq_len, seed, plan.data.packing_mask)
        return SeparateDocuments(folder / name, seq_len, seed, eos)

    check_targets(plan, meta)
    train = split("train")
    validation = split("validation") if plan.data.validation is not None else None
    if train.windows < 1 or (validation is not None and validation.windows < 1):
        empty = "training" if train.windows < 1 else "validation"
        raise ValueError(f"the {empty} documents fill less than one window of seq_len {seq_len} + 1 tokens")
    return train, validation, report_lines(plan, meta, folder, train.windows)


def check_targets(plan: Plan, meta: token_cache.CacheMeta) -> None:
    """A chat split whose targets are (nearly) none trains nothing while reporting a loss: refused before the
    first step, naming the cause."""
    if plan.data.format is not DataFormat.chat or plan.data.loss_on is not LossOn.assistant:
        return
    for name, counts in meta.splits.items():
        if counts.documents and counts.targets < MIN_TARGET_SHARE * counts.tokens:
            raise TargetsError(
                f"data.loss_on=assistant: the {name} split has {counts.targets:,} target tokens of {counts.tokens:,} "
                f"(under {MIN_TARGET_SHARE:.0%}): its conversations have (almost) no assistant replies the chat "
                "template writes; check the records' roles and the tokenizer's chat template, or set data.loss_on=all"
            )


def report_lines(plan: Plan, meta: token_cache.CacheMeta, folder: Path, windows: int) -> list[str]:
    train = meta.splits["train"]
    if plan.data.format is DataFormat.preference:
        return _pair_lines(plan, meta, folder, windows)
    lines = [f"documents         {train.documents:,} training, {train.tokens:,} tokens ({plan.data.format.value})"]
    held = meta.splits.get("validation")
    if held and held.documents:
        lines.append(f"validation        {held.documents:,} documents, {held.tokens:,} tokens held out")
    lines.append(_packing_line(plan, folder / "train"))
    if plan.data.format is DataFormat.chat:
        masked = 1 - train.targets / max(train.tokens, 1)
        lines.append(f"loss on           {plan.data.loss_on.value} tokens: {masked:.1%} of tokens masked out")
    epochs = plan.trainer.steps * plan.batch.global_batch / windows
    lines.append(f"epochs            {epochs:.2f} over {plan.trainer.steps} steps of {plan.batch.global_batch} windows")
    return lines


def _pair_lines(plan: Plan, meta: token_cache.CacheMeta, folder: Path, pairs: int) -> list[str]:
    """What a preference run reads: its pairs, those cut to the window (either completion), the held-out ones."""
    lengths = np.diff(np.load(folder / "train" / "starts.npy")).reshape(-1, 2)  # each completion and its eos
    truncated = int((lengths > plan.model.seq_len + 1).any(axis=1).sum())
    train, held = meta.splits["train"], meta.splits.get("validation")
    lines = [
        f"pairs             {pairs:,} training, {train.tokens:,} tokens, {train.targets:,} of them completions",
        f"truncated         {truncated:,} pairs longer than seq_len {plan.model.seq_len} + 1 (the prompt kept first)",
    ]
    if held and held.documents:
        lines.append(f"validation        {held.documents // 2:,} pairs held out")
    epochs = plan.trainer.steps * plan.batch.global_batch / pairs
    lines.append(f"epochs            {epochs:.2f} over {plan.trainer.steps} steps of {plan.batch.global_batch} pairs")
    return lines


def _packing_line(plan: Plan, split: Path) -> str:
    """Packing efficiency: document tokens (not separators or padding) ÷ the slots of the windows."""
    starts, window = np.load(split / "starts.npy"), plan.model.seq_len + 1
    lengths = np.diff(starts)  # each document and its end-of-text token
    if plan.data.packing:
        windows = (int(starts[-1]) - 1) // plan.model.seq_len
        efficiency = (int(starts[-1]) - len(lengths)) / max(int(starts[-1]), 1)
        masked = ", attention inside documents" if plan.data.packing_mask else ""
        return f"packing           {windows:,} windows of {window}, efficiency {efficiency:.1%}, 0 truncated{masked}"
    used = np.minimum(lengths - 1, window)
    truncated = int((lengths > window).sum())
    efficiency = used.sum() / max(len(lengths) * window, 1)
    return (
        f"packing           off: {len(lengths):,} windows of {window}, efficiency {efficiency:.1%}, "
        f"{truncated:,} truncated"
    )
