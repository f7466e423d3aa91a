"""Context parallelism (`parallelism.cp`, all-to-all over heads, as DeepSpeed-Ulysses): the cp ranks of a group
(consecutive data-parallel ranks) read the same sequences, and each runs the model on its own part of every
sequence; attention alone needs the whole sequence, and gets it by trading heads for tokens.

- A rank's part is two of the sequence's 2 × cp equal chunks, the r-th from the start and the r-th from the end,
  so every rank has as much causal attention to compute (an early chunk attends to little, a late one to much).
- Each token keeps its true position (RoPE, learned positions) and a packed window its documents: the document
  mask is made from the whole window's positions, which every rank has.
- Attention: an all-to-all turns q, k, v of (this rank's tokens, all heads) into (all tokens, heads / cp),
  put back in the sequence's order; any attention kernel then runs on the whole sequence (causal, or the
  document mask), and a second all-to-all returns (this rank's tokens, all heads).
- The loss: each rank's targets' log-probabilities, placed into the whole sequence and summed over the group
  (an autograd all-reduce), so every rank computes the exact loss of the whole sequences (the cross-entropy and
  DPO's alike). The backward of that sum hands every rank cp × the loss's gradient of its own tokens, and the
  data-parallel average over all dp ranks then gives the mean over the dp / cp replicas: the gradients of a
  run without cp.
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_reduce, all_to_all_single

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def balanced_indices(seq: int, size: int, rank: int) -> torch.Tensor:
    """The token indices rank `rank` of `size` holds: chunk `rank` and chunk 2 × size − 1 − rank of 2 × size."""
    chunk = seq // (2 * size)
    late = 2 * size - 1 - rank
    return torch.cat([torch.arange(rank * chunk, (rank + 1) * chunk), torch.arange(late * chunk, (late + 1) * chunk)])


class ContextParallel:
    """This rank's place in its context-parallel group, and the exchanges of `module`-level code."""

    def __init__(self, group: dist.ProcessGroup, size: int, rank: int) -> None:
        self.group, self.size, self.rank = group, size, rank
        self._orders: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def __deepcopy__(self, memo: dict) -> "ContextParallel":
        return self  # a copy of the model (DPO's reference) splits its sequences over the same group

    def indices(self, seq: int, device: torch.device) -> torch.Tensor:
        return balanced_indices(seq, self.size, self.rank).to(device)

    def own_part(
        self, tokens: torch.Tensor, positions: torch.Tensor | None, targets: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """This rank's part of the token ids (batch, seq), their true positions (a packed window's, or 0..seq-1)
        and their targets."""
        own = self.indices(tokens.shape[1], tokens.device)
        positions = own.expand(len(tokens), -1) if positions is None else positions[:, own]
        return tokens[:, own], positions, None if targets is None else targets[:, own]

    def around(self, attend: Attend) -> Attend:
        """`attend` over the whole sequence, for q, k, v (batch, heads, this rank's tokens, head_dim)."""

        def exchanged(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            gathered, in_order = self._order(q.shape[2] * self.size, q.device)
            whole = [self._to_sequence(x).index_select(2, in_order) for x in (q, k, v)]
            out = attend(*whole, mask)
            return self._to_heads(out.index_select(2, gathered))

        return exchanged

    def _order(self, seq: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's tokens in rank order (each rank's indices in turn) and the permutation back to the
        sequence's order: made once per sequence length, not in every layer of every step."""
        if (seq, device) not in self._orders:
            gathered = torch.cat([balanced_indices(seq, self.size, rank) for rank in range(self.size)]).to(device)
            self._orders[seq, device] = gathered, torch.argsort(gathered)
        return self._orders[seq, device]

    def _to_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, heads, own tokens, d) → (batch, heads / cp, every rank's tokens in rank order, d)."""
        batch, heads, own, width = x.shape
        parts = x.reshape(batch, self.size, heads // self.size, own, width).transpose(0, 1).contiguous()
        received = all_to_all_single(torch.empty_like(parts), parts, group=self.group)
        return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // self.size, self.size * own, width)

    def _to_heads(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of `_to_sequence`."""
        batch, heads, seq, width = x.shape
        own = seq // self.size
        parts = x.reshape(batch, heads, self.size, own, width).permute(2, 0, 1, 3, 4).contiguous()
        received = all_to_all_single(torch.empty_like(parts), parts, group=self.group)
        return received.transpose(0, 1).reshape(batch, heads * self.size, own, width)

    def whole_sequence(self, own: torch.Tensor, seq: int) -> torch.Tensor:
        """Per-token values of this rank's tokens (batch, own) → those of the whole sequences (batch, seq), summed
        over the group (each token is one rank's; the others add zero)."""
        placed = own.new_zeros(own.shape[0], seq).index_copy(1, self.indices(seq, own.device), own)
        return all_reduce(placed, group=self.group)


def context_groups(dp: int, cp: int) -> ContextParallel | None:
    """This rank's group of cp consecutive data-parallel ranks (tp = pp = 1 under cp: a rank is its dp rank);
    every rank creates every group, as `new_group` requires."""
    if cp == 1:
        return None
    rank, mine = dist.get_rank(), None
    for first in range(0, dp, cp):
        group = dist.new_group(list(range(first, first + cp)))
        if first <= rank < first + cp:
            mine = ContextParallel(group, cp, rank - first)
    return mine
