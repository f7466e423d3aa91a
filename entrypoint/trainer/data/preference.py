"""`data.format=preference`: pairs of a prompt with a chosen and a rejected completion (text or message lists, as
TRL's standard preference formats, or two conversations whose shared first messages are the prompt), each
completion rendered as a prompt/completion conversation (`chat`) whose targets are the completion's tokens, for
DPO (`trainer.objective=dpo`)."""

from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import numpy as np
import torch

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn, Overlong
from entrypoint.trainer.data import shapes
from entrypoint.trainer.data.base import Batch, CacheMeta, Encoded
from entrypoint.trainer.data.chat import ChatEncoder, rendered
from entrypoint.trainer.data.text import TextFormat
from entrypoint.trainer.data.windows import Pairs, SeparateDocuments, Split

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "tools")


class PreferencePairs(SeparateDocuments):
    """The pairs of a preference split (documents 2i and 2i + 1: the prompt with the chosen completion, then with
    the rejected one), each completion in a window of its own, cut at the end when longer (the prompt kept
    first, as TRL's `truncation_mode=keep_start`). A micro batch of m pairs is 2m rows: the chosen ones, then
    the rejected ones in the same order."""

    def __init__(self, split: Path | Split, seq_len: int, seed: int, eos: int, max_prompt: int | None = None) -> None:
        super().__init__(split, seq_len, seed, eos)
        self.windows //= 2
        self.max_prompt = max_prompt

    def overlong(self) -> np.ndarray:
        """Whether either completion of each pair exceeds its window."""
        return super().overlong().reshape(-1, 2).any(axis=1)

    def first(self, index: int) -> int:
        """With `data.max_prompt_length`: the prompt's last that many tokens only (its targets start the
        completion), as TRL cuts a prompt from the left."""
        start = int(self.starts[index])
        if self.max_prompt is None:
            return start
        prompt = int(np.argmax(self.targets[start : int(self.starts[index + 1])]))
        return start + max(0, prompt - self.max_prompt)

    def firsts(self) -> np.ndarray:
        if self.max_prompt is None:
            return super().firsts()
        return np.array([self.first(index) for index in range(len(self.starts) - 1)], dtype=np.int64)

    def __call__(self, indices: torch.Tensor) -> Pairs:
        return self.pairs([self.shuffled(index) for index in indices.tolist()])

    def pairs(self, numbers: list[int]) -> Pairs:
        return self.rows([2 * pair for pair in numbers] + [2 * pair + 1 for pair in numbers])

    def every_pair(self, rank: int, ranks: int, micro: int) -> Iterator[Pairs]:
        """Every pair once over all `ranks`, this rank's share in micro batches of up to `micro` pairs, as many
        on every rank (sharded models run their forward passes together): a rank with fewer repeats a pair."""
        mine = [self.numbered(window) for window in range(rank, self.windows, ranks)] or [self.numbered(0)]
        for start in range(0, -(-self.windows // ranks), micro):
            yield self.pairs(mine[start : start + micro] or mine[:1])


class PreferenceFormat(TextFormat):
    name = DataFormat.preference

    def columns(self, field: str) -> tuple[str, ...]:
        return PAIR_COLUMNS

    def record(self, row: dict, field: str, where: str) -> dict:
        """The record's prompt, chosen and rejected completions (and tools), all text or all message lists."""
        found = {name: row[name] for name in PAIR_COLUMNS if row.get(name) is not None}
        if isinstance(found.get("prompt"), list):
            found |= {name: shapes.reply(found[name]) for name in PAIR_COLUMNS[1:3] if name in found}
        prompt, chosen, rejected = (found.get(name) for name in PAIR_COLUMNS[:3])
        if isinstance(prompt, str | list) and type(prompt) is type(chosen) is type(rejected):
            return found
        if prompt is None and isinstance(chosen, list) and isinstance(rejected, list):
            return found | shapes.implicit_prompt(chosen, rejected, where)
        raise ValueError(
            f"{where}: no preference pair: 'prompt', 'chosen' and 'rejected', all text or all message lists (or "
            "'chosen' and 'rejected' conversations that start with the same prompt)"
        )

    def encoder(self, folder: Path, loss_on: LossOn, today: date) -> Callable[[Batch], list[Encoded]]:
        """A pair gives two documents, one after the other: the prompt with the chosen completion, then with the
        rejected one; a pair's targets are its completion's tokens, whatever `data.loss_on` says."""
        chat = ChatEncoder(folder, LossOn.assistant, today)

        def encode(batch: Batch) -> list[Encoded]:
            completed = [(where, one) for where, pair in batch for one in _completions(pair)]
            return chat.tokenize([rendered(chat, where, record) for where, record in completed])

        return encode

    def windows(self, split: Split, plan: Plan, eos: int) -> PreferencePairs:
        pairs = PreferencePairs(split, plan.model.seq_len, plan.trainer.seed, eos, plan.data.max_prompt_length)
        if plan.data.overlong is Overlong.drop:
            pairs.drop_overlong()
        return pairs

    def report(self, plan: Plan, meta: CacheMeta, train_split: Split, windows: int) -> list[str]:
        """What a preference run reads: its pairs, those cut to the window (either completion), the held-out ones."""
        overlong = int(self.windows(train_split, plan, 0).overlong().sum())
        train, held, seq_len = meta.splits["train"], meta.splits.get("validation"), plan.model.seq_len
        dropped = plan.data.overlong is Overlong.drop
        how = "(data.overlong=drop)" if dropped else "(the prompt kept first)"
        lines = [
            f"pairs             {windows:,} training, {train.tokens:,} tokens, {train.targets:,} of them completions",
            f"{'dropped' if dropped else 'truncated':<18}{overlong:,} pairs longer than seq_len {seq_len} + 1 {how}",
            *_prompts_cut(plan),
        ]
        if held and held.documents:
            lines.append(f"validation        {held.documents // 2:,} pairs held out")
        epochs = plan.trainer.steps * plan.batch.global_batch / windows
        lines.append(
            f"epochs            {epochs:.2f} over {plan.trainer.steps} steps of {plan.batch.global_batch} pairs"
        )
        return lines


def _prompts_cut(plan: Plan) -> list[str]:
    limit = plan.data.max_prompt_length
    return [] if limit is None else [f"prompts           cut to their last {limit} tokens (data.max_prompt_length)"]


def _completions(pair: dict) -> tuple[dict, dict]:
    """A preference pair as two prompt/completion records (`chat`): chosen, then rejected."""
    shared = {name: pair[name] for name in ("prompt", "tools") if name in pair}
    return shared | {"completion": pair["chosen"]}, shared | {"completion": pair["rejected"]}
