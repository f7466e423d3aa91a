"""The token cache in shards: N workers (the nodes of a `dockyard tokenize` job, or of a training job whose cache
folder they all share) each tokenize a disjoint, contiguous share of the documents into a shard, and one of them
then writes the cache folder: a `meta.json` that lists the shards in order. Read through it, the shards give the
windows of the one-worker cache, in the same order: the same key, the same documents in the same order, the same
validation draw (made when the folder is written, over every document in order, as the one-worker cache draws it).

A share is a range of the bytes of the data's sources, taken in order (the training sources, then the held-out
ones): a plain JSONL file is cut at line boundaries (a line belongs to the worker whose range holds its first
byte), so one large file still splits; any other source (compressed JSONL, Parquet, text, a saved dataset) goes
whole to the worker whose range holds its first byte.

A shard is a cache folder of its own (`cache.build`, written beside the cache as `<key>.shards/shard-k-of-n`)
whose documents are not yet drawn: `train` holds the training sources' documents, `validation` the held-out ones'.
"""

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.token_cache_key import JSONL_SUFFIXES, META_FILE, kind
from entrypoint.trainer.data import cache, documents
from entrypoint.trainer.data.base import CacheMeta, SplitCounts
from entrypoint.trainer.data.windows import Documents, stored

POLL_S = 1.0


@dataclass(frozen=True)
class Piece:
    """A source of one split, or its bytes [start, end) for a JSONL file cut between workers."""

    split: str
    path: Path
    start: int = 0
    end: int | None = None


def shares(splits: dict[str, list[Path]], workers: int) -> list[list[Piece]]:
    """Each worker's pieces: contiguous ranges of the sources' bytes, in order, of about equal size."""
    sized = [(split, path, _size(path)) for split, paths in splits.items() for path in paths]
    total = sum(size for _, _, size in sized)
    bounds = [total * k // workers for k in range(workers + 1)]
    result: list[list[Piece]] = [[] for _ in range(workers)]
    offset = 0
    for split, path, size in sized:
        if kind(path) == JSONL_SUFFIXES[0] and path.is_file():
            for k in range(workers):
                low, high = max(bounds[k], offset), min(bounds[k + 1], offset + size)
                if low < high or (size == 0 and bounds[k] <= offset < bounds[k + 1]):
                    whole = low == offset and high == offset + size
                    result[k].append(Piece(split, path) if whole else Piece(split, path, low - offset, high - offset))
        else:
            owner = next(k for k in range(workers) if offset < bounds[k + 1] or k == workers - 1)
            result[owner].append(Piece(split, path))
        offset += size
    return result


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def share_batches(pieces: list[Piece], plan: Plan) -> Iterator[tuple[str, list]]:
    """(split, documents) in batches of `cache.BATCH_DOCUMENTS`, in order, none held out yet."""
    batch: list = []
    split = pieces[0].split if pieces else "train"
    for piece in pieces:
        if piece.split != split and batch:
            yield split, batch
            batch = []
        split = piece.split
        for where, record in _records(piece, plan):
            batch.append((where, record))
            if len(batch) == cache.BATCH_DOCUMENTS:
                yield split, batch
                batch = []
    if batch:
        yield split, batch


def _records(piece: Piece, plan: Plan) -> Iterator[tuple[str, object]]:
    if piece.end is None:
        for number, record in enumerate(documents.records(piece.path, plan.data.format, plan.data.field), 1):
            yield f"{piece.path}, record {number}", record
        return
    for offset, line in documents.lines_between(piece.path, piece.start, piece.end):
        where = f"{piece.path}, the record at byte {offset}"
        yield where, documents.record(line, plan.data.format, plan.data.field, where)


def shard_name(worker: int, workers: int) -> str:
    return f"shard-{worker:05d}-of-{workers:05d}"


def shards_folder(root: Path, key: str) -> Path:
    return root / f"{key}.shards"


def write_shard(
    root: Path,
    key: str,
    worker: int,
    workers: int,
    encoder: cache.Encoder,
    pieces: list[Piece],
    plan: Plan,
    log: Callable[[str], None],
) -> CacheMeta:
    """Tokenizes this worker's pieces into its shard (a shard already written is kept: a restarted job skips it)."""
    folder, name = shards_folder(root, key), shard_name(worker, workers)
    if (folder / name).is_dir():
        log(f"tokenize          shard {worker + 1} of {workers} already written")
        return CacheMeta.read(folder / name)
    folder.mkdir(parents=True, exist_ok=True)
    return cache.build(folder, name, encoder, lambda: share_batches(pieces, plan), log)


def assemble(root: Path, key: str, workers: int, plan: Plan, log: Callable[[str], None]) -> Path:
    """Waits for every shard, then writes the cache folder `root/key`: the shards in order and the counts of each
    split after the validation draw. Moved into place whole, as `cache.build` does."""
    folder = shards_folder(root, key)
    names = [shard_name(k, workers) for k in range(workers)]
    while not all((folder / name).is_dir() for name in names):
        time.sleep(POLL_S)
    metas = [CacheMeta.read(folder / name) for name in names]
    held = cache.held_out(plan, sum(m.splits.get("train", SplitCounts()).documents for m in metas))
    parts = {split: [stored(folder / name / split) for name in names] for split in cache.SPLITS}
    meta = CacheMeta(key, tokenize_s=max(m.tokenize_s for m in metas))
    for split in cache.SPLITS[: 2 if plan.data.validation is not None else 1]:
        keep = _kept(split, held)
        source = parts["train"] if held is not None else parts[split]
        meta.splits[split] = _counts(Documents(source, keep))
    record = asdict(meta) | {"shards": [f"../{folder.name}/{name}" for name in names]}
    partial = root / f".{key}.{workers}.partial"
    partial.mkdir(parents=True, exist_ok=True)
    (partial / META_FILE).write_text(json.dumps(record))
    try:
        partial.rename(root / key)
    except OSError:
        (partial / META_FILE).unlink()
        partial.rmdir()  # another worker's folder is in place, with the same contents
    log(f"tokenize          {workers} shards assembled into {root / key}")
    return root / key


def _kept(split: str, held: np.ndarray | None) -> np.ndarray | None:
    """The documents of `split` among the training ones, after the validation draw (`cache.held_out`)."""
    if held is None:
        return None
    return ~held if split == "train" else held


def _counts(split: Documents) -> SplitCounts:
    lengths = np.diff(split.starts)
    targets = sum(int(split.targets[int(a) : int(b)].sum()) for a, b in _runs(split.starts))
    return SplitCounts(documents=len(lengths), tokens=int(lengths.sum()) - len(lengths), targets=targets)


def _runs(starts: np.ndarray, run: int = 1 << 24) -> Iterator[tuple[int, int]]:
    """The stream in runs of about `run` tokens (the targets summed a run at a time, never all in memory)."""
    end = int(starts[-1])
    for low in range(0, end, run):
        yield low, min(low + run, end)


def sharded(folder: Path) -> list[Path] | None:
    """The shards a cache folder lists, in order; None for a one-worker cache."""
    record = json.loads((folder / META_FILE).read_text())
    if "shards" not in record:
        return None
    return [(folder / name).resolve() for name in record["shards"]]


def open_split(folder: Path, split: str, plan: Plan) -> Documents:
    """A split of a cache folder, one-worker or sharded, as the window reader reads it."""
    shards = sharded(folder)
    if shards is None:
        return stored(folder / split)
    train = [stored(shard / "train") for shard in shards]
    held = cache.held_out(plan, sum(len(part.starts) - 1 for part in train))
    if held is None:
        return Documents([stored(shard / split) for shard in shards], None)
    return Documents(train, _kept(split, held))
