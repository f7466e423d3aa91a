"""Training data: (input, target) token batches for one data-parallel rank.

Every source is a map from a global sample index to a sequence of seq_len + 1 tokens. The sampler
gives data-parallel rank r, at optimizer step s and micro batch m, the samples
`((s × grad_accum + m) × dp + r) × micro_batch + k`: disjoint across ranks, the same for every
strategy with the same global batch (so DDP, FSDP and ZeRO see identical data), and a function of the
step alone, so a resumed run continues with exactly the batches it would have seen.
"""

from collections.abc import Callable
from pathlib import Path

import torch

from compiler.spec import Plan
from compiler.spec.schema import DataSource
from entrypoint.trainer.data.windows import Pairs, TokenFiles, next_token_pairs


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
