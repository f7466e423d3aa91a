"""The window reader: a map from a window's number to its seq_len + 1 tokens (and which of them are targets),
visited in a seeded random order, over the token cache's arrays (one folder's, or a sharded cache's read as one
stream) or over token files, memory-mapped: a rank reads only the windows it trains on.

Packing (`data.packing=true`) cuts the stream of documents, each followed by the end-of-text token, into
consecutive windows of seq_len + 1 tokens (with `data.packing_mask`, each token's position in its document
goes with it, so that attention stays inside documents); `data.packing_strategy=bfd` instead places whole
documents into windows (`best_fit`), padded; without packing each document has a window of its own, padded with
end-of-text tokens that are no targets and truncated (counted) when it is longer.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from entrypoint.trainer.data.best_fit import best_fit_decreasing
from entrypoint.trainer.models.loss import IGNORE_INDEX
from entrypoint.trainer.models.packed import packed

TOKEN_SUFFIXES = (".bin", ".npy", ".tokens")


Pairs = tuple[torch.Tensor, torch.Tensor]
"""(inputs, targets) of a micro batch."""


def next_token_pairs(tokens: torch.Tensor) -> Pairs:
    return tokens[:, :-1], tokens[:, 1:]


class ShuffledWindows:
    """Windows of seq_len + 1 tokens visited in a seeded random order, a fresh order each epoch; a subclass
    says what window i holds and which of its tokens are training targets (None: all of them)."""

    def __init__(self, windows: int, seq_len: int, seed: int) -> None:
        self.windows, self.seq_len, self.seed = windows, seq_len, seed
        self._orders: dict[int, torch.Tensor] = {}

    def window(self, index: int) -> tuple[np.ndarray, np.ndarray | None]: ...

    def positions(self, index: int) -> np.ndarray | None:
        """Each token's position in its document (packed windows with `data.packing_mask`), else None."""
        return None

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._orders = {epoch: torch.randperm(self.windows, generator=generator)}
        return self._orders[epoch]

    def __call__(self, indices: torch.Tensor) -> Pairs:
        return self.rows([self.shuffled(index) for index in indices.tolist()])

    def shuffled(self, index: int) -> int:
        """The window sample `index` reads: its place in its epoch's order."""
        return int(self._order(index // self.windows)[index % self.windows])

    def rows(self, windows: list[int]) -> Pairs:
        """The (inputs, targets) of these windows, a row each."""
        rows, flags, places = [], [], []
        for window in windows:
            tokens, targets = self.window(window)
            rows.append(torch.from_numpy(tokens.astype(np.int64)))
            flags.append(None if targets is None else torch.from_numpy(targets.astype(bool)))
            positions = self.positions(window)
            places.append(None if positions is None else torch.from_numpy(positions.astype(np.int64)))
        inputs, targets = next_token_pairs(torch.stack(rows))
        if any(flag is not None for flag in flags):
            kept = torch.stack([torch.ones(self.seq_len + 1, dtype=torch.bool) if f is None else f for f in flags])
            targets = targets.masked_fill(~kept[:, 1:], IGNORE_INDEX)
        if places[0] is not None:
            positions = torch.stack(places)
            # a document's first token is no target: its input is the end of the previous document
            targets = targets.masked_fill(positions[:, 1:] == 0, IGNORE_INDEX)
            inputs = packed(inputs, positions[:, :-1])
        return inputs, targets


class TokenFiles(ShuffledWindows):
    """Memory-mapped token files (flat arrays of uint16/uint32), read as one stream cut into windows."""

    def __init__(self, folder: Path, dtype: str, seq_len: int, seed: int) -> None:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TOKEN_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"no token files ({', '.join(TOKEN_SUFFIXES)}) under {folder}")
        self.arrays = [_memmap(path, np.dtype(dtype)) for path in files]
        self.starts = np.cumsum([0] + [len(a) for a in self.arrays])
        super().__init__((int(self.starts[-1]) - 1) // seq_len, seq_len, seed)
        if self.windows < 1:
            raise ValueError(f"{folder} holds {self.starts[-1]} tokens, fewer than one sequence of {seq_len + 1}")

    def window(self, index: int) -> tuple[np.ndarray, None]:
        """seq_len + 1 tokens from the stream, across a file boundary if need be."""
        start = index * self.seq_len
        end, parts = start + self.seq_len + 1, []
        file = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < end:
            offset = start - int(self.starts[file])
            take = min(end - start, len(self.arrays[file]) - offset)
            parts.append(self.arrays[file][offset : offset + take])
            start, file = start + take, file + 1
        return np.concatenate(parts), None


def _memmap(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.suffix == ".npy":
        return np.load(path, mmap_mode="r")
    return np.memmap(path, dtype=dtype, mode="r")


@dataclass(frozen=True)
class Stored:
    """A split of a cache folder: its arrays memory-mapped (the document starts read whole: one per document)."""

    tokens: np.ndarray
    targets: np.ndarray
    starts: np.ndarray


def stored(split: Path) -> Stored:
    return Stored(
        np.load(split / "tokens.npy", mmap_mode="r"),
        np.load(split / "targets.npy", mmap_mode="r"),
        np.load(split / "starts.npy"),
    )


class Documents:
    """The documents of several stored splits (a sharded cache's, in order), or the `keep` ones of them, as one
    stream: `tokens[a:b]` and `targets[a:b]` read only the documents that range covers."""

    def __init__(self, parts: list[Stored], keep: np.ndarray | None) -> None:
        self.parts = parts
        lengths = np.concatenate([np.diff(p.starts) for p in parts])
        part = np.concatenate([np.full(len(p.starts) - 1, k) for k, p in enumerate(parts)])
        origin = np.concatenate([p.starts[:-1] for p in parts])
        if keep is not None:
            lengths, part, origin = lengths[keep], part[keep], origin[keep]
        self.starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        # runs of documents that lie one after the other in one part, read in one slice each
        first = np.ones(len(lengths), dtype=bool)
        first[1:] = (part[1:] != part[:-1]) | (origin[1:] != origin[:-1] + lengths[:-1])
        runs = np.flatnonzero(first)
        self.run_starts = np.append(self.starts[runs], self.starts[-1])
        self.run_part, self.run_origin = part[runs], origin[runs]
        self.tokens, self.targets = _Stream(self, "tokens"), _Stream(self, "targets")

    def read(self, name: str, start: int, end: int) -> np.ndarray:
        end = min(end, int(self.starts[-1]))
        pieces = [np.zeros(0, dtype=getattr(self.parts[0], name).dtype)]
        run = int(np.searchsorted(self.run_starts, start, side="right")) - 1
        while start < end:
            offset = int(self.run_origin[run]) + start - int(self.run_starts[run])
            take = min(end, int(self.run_starts[run + 1])) - start
            pieces.append(getattr(self.parts[int(self.run_part[run])], name)[offset : offset + take])
            start, run = start + take, run + 1
        return np.concatenate(pieces)


class _Stream:
    """One array of `Documents`, sliced as a memory-mapped array is."""

    def __init__(self, documents: Documents, name: str) -> None:
        self.documents, self.name = documents, name
        self.dtype = getattr(documents.parts[0], name).dtype

    def __len__(self) -> int:
        return int(self.documents.starts[-1])

    def __getitem__(self, cut: slice) -> np.ndarray:
        return self.documents.read(self.name, cut.start or 0, len(self) if cut.stop is None else cut.stop)


Split = Stored | Documents
"""A split as the windows read it: `tokens[a:b]`, `targets[a:b]`, `starts`."""


def opened(split: Path | Split) -> Split:
    return stored(split) if isinstance(split, Path) else split


class PackedDocuments(ShuffledWindows):
    def __init__(self, split: Path | Split, seq_len: int, seed: int, mask_boundaries: bool = False) -> None:
        split = opened(split)
        self.tokens, self.targets = split.tokens, split.targets
        self.starts = split.starts if mask_boundaries else None
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
    def __init__(self, split: Path | Split, seq_len: int, seed: int, eos: int) -> None:
        split = opened(split)
        self.tokens, self.targets, self.starts = split.tokens, split.targets, split.starts
        self.eos = eos
        self.kept: np.ndarray | None = None
        """After `drop_overlong`: the windows read, in order (a window number → the one it reads)."""
        super().__init__(len(self.starts) - 1, seq_len, seed)

    def first(self, index: int) -> int:
        """Where document `index`'s window starts: its first token."""
        return int(self.starts[index])

    def firsts(self) -> np.ndarray:
        """`first` of every document at once."""
        return self.starts[:-1]

    def overlong(self) -> np.ndarray:
        """Whether each window's document (and its end-of-text token), read from `first`, exceeds the window."""
        return self.starts[1:] - self.firsts() > self.seq_len + 1

    def drop_overlong(self) -> None:
        """`data.overlong=drop`: read only the windows that hold their document whole."""
        self.kept = np.flatnonzero(~self.overlong())
        self.windows = len(self.kept)
        self._orders = {}

    def numbered(self, window: int) -> int:
        """The window that window number `window` reads (all of them in order unless some were dropped)."""
        return window if self.kept is None else int(self.kept[window])

    def shuffled(self, index: int) -> int:
        return self.numbered(super().shuffled(index))

    def window(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start = self.first(index)
        end = min(int(self.starts[index + 1]), start + self.seq_len + 1)
        pad = self.seq_len + 1 - (end - start)
        tokens = np.concatenate([self.tokens[start:end], np.full(pad, self.eos, dtype=self.tokens.dtype)])
        return tokens, np.concatenate([self.targets[start:end], np.zeros(pad, dtype=np.uint8)])


class WholeDocuments(ShuffledWindows):
    """`data.packing_strategy=bfd`: each window holds whole documents (best-fit decreasing), padded with end-of-text
    tokens that are no targets; a document longer than the window has one of its own, cut at the end, or with
    `drop_overlong` none. With `mask_boundaries` each token's position in its document goes with it, as in
    `PackedDocuments`."""

    def __init__(
        self, split: Path | Split, seq_len: int, seed: int, eos: int, mask_boundaries: bool, drop_overlong: bool
    ) -> None:
        split = opened(split)
        self.tokens, self.targets, self.starts, self.eos = split.tokens, split.targets, split.starts, eos
        self.mask_boundaries = mask_boundaries
        lengths = np.diff(self.starts)
        numbers = np.flatnonzero(lengths <= seq_len + 1) if drop_overlong else np.arange(len(lengths))
        self.documents = [numbers[placed].tolist() for placed in best_fit_decreasing(lengths[numbers], seq_len + 1)]
        """The documents of each window, by number."""
        super().__init__(len(self.documents), seq_len, seed)

    def _pieces(self, index: int) -> tuple[list[tuple[int, int]], int]:
        """(start, end) of each document window `index` holds, cut to the window, and the padding after them."""
        room, pieces = self.seq_len + 1, []
        for document in self.documents[index]:
            start = int(self.starts[document])
            end = min(int(self.starts[document + 1]), start + room)
            pieces.append((start, end))
            room -= end - start
        return pieces, room

    def window(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        pieces, pad = self._pieces(index)
        tokens = [self.tokens[start:end] for start, end in pieces] + [np.full(pad, self.eos, self.tokens.dtype)]
        targets = [self.targets[start:end] for start, end in pieces] + [np.zeros(pad, dtype=np.uint8)]
        return np.concatenate(tokens), np.concatenate(targets)

    def positions(self, index: int) -> np.ndarray | None:
        """With `data.packing_mask`: each token's position in its document (the padding one more document)."""
        if not self.mask_boundaries:
            return None
        pieces, pad = self._pieces(index)
        return np.concatenate([np.arange(end - start) for start, end in pieces] + [np.arange(pad)])
