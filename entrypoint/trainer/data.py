"""Training data: (input, target) token batches for one data-parallel rank.

Every source is a map from a global sample index to a sequence of seq_len + 1 tokens. The sampler
gives data-parallel rank r, at optimizer step s and micro batch m, the samples
`((s × grad_accum + m) × dp + r) × micro_batch + k`: disjoint across ranks, the same for every
strategy with the same global batch (so DDP, FSDP and ZeRO see identical data), and a function of the
step alone, so a resumed run continues with exactly the batches it would have seen.
"""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from compiler.spec import Plan
from compiler.spec.schema import DataSource
from entrypoint.trainer.models.loss import IGNORE_INDEX
from entrypoint.trainer.models.packed import packed

TOKEN_SUFFIXES = (".bin", ".npy", ".tokens")


Pairs = tuple[torch.Tensor, torch.Tensor]
"""(inputs, targets) of a micro batch."""


def next_token_pairs(tokens: torch.Tensor) -> Pairs:
    return tokens[:, :-1], tokens[:, 1:]


class SyntheticTokens:
    """Walks of a fixed random permutation of the vocabulary: learnable (each token determines the next),
    so the loss falls within a few steps, which random tokens would not show."""

    def __init__(self, vocab: int, seq_len: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.successor = torch.randperm(vocab, generator=generator)
        self.vocab, self.seq_len, self.seed = vocab, seq_len, seed

    def __call__(self, indices: torch.Tensor) -> Pairs:
        return next_token_pairs(self.walks(indices))

    def walks(self, indices: torch.Tensor) -> torch.Tensor:
        current = (indices * 2654435761 + self.seed) % self.vocab
        tokens = [current]
        for _ in range(self.seq_len):
            current = self.successor[current]
            tokens.append(current)
        return torch.stack(tokens, dim=1)


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


def data_folder(plan: Plan, channel_dir: Path) -> Path:
    """Where the token files of a non-synthetic source are: the channel SageMaker filled, else data.path."""
    if channel_dir.is_dir() and any(channel_dir.iterdir()):
        return channel_dir
    if plan.data.source is DataSource.s3:
        return channel_dir
    return Path(plan.data.path or channel_dir)


def make_source(plan: Plan, folder: Path | None) -> Callable[[torch.Tensor], Pairs]:
    model, seed = plan.model, plan.trainer.seed
    if plan.data.source is DataSource.synthetic:
        return SyntheticTokens(model.vocab, model.seq_len, seed)
    return TokenFiles(folder, plan.data.token_dtype, model.seq_len, seed)


class Batches:
    """The micro batches one data-parallel rank trains on, by step: its replica's, where the cp consecutive dp
    ranks of a context-parallel group (`parallelism.cp`) are one replica reading the same sequences."""

    def __init__(self, source: Callable[[torch.Tensor], Pairs], plan: Plan, dp_rank: int) -> None:
        self.source, self.replica = source, dp_rank // plan.layout.cp
        self.micro, self.accum, self.replicas = plan.batch.micro_batch, plan.batch.grad_accum, plan.layout.data_replicas

    def micro_batch(self, step: int, micro: int) -> Pairs:
        first = ((step * self.accum + micro) * self.replicas + self.replica) * self.micro
        return self.source(torch.arange(first, first + self.micro))
