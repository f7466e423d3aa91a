"""`data.format=text`: plain documents, a string column (`data.field`) or a whole .txt file each, encoded with the
`tokenizers` library's `tokenizer.json` (`encode_batch`, in Rust, on all the node's cores); every token is a
target. Also the base of the chat format, which cuts and reports its windows the same way."""

from collections.abc import Callable
from datetime import date
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn, Overlong, PackingStrategy
from compiler.spec.tokenizer import TOKENIZER_FILE
from entrypoint.trainer.data.base import Batch, CacheMeta, Encoded
from entrypoint.trainer.data.windows import (
    PackedDocuments,
    SeparateDocuments,
    ShuffledWindows,
    Split,
    WholeDocuments,
)


class TextFormat:
    name = DataFormat.text

    def columns(self, field: str) -> tuple[str, ...]:
        return (field,)

    def record(self, row: dict, field: str, where: str) -> str:
        value = row.get(field)
        if not isinstance(value, str):
            raise ValueError(f"{where}: no str in its '{field}' field")
        return value

    def encoder(self, folder: Path, loss_on: LossOn, today: date) -> Callable[[Batch], list[Encoded]]:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))

        def encode(batch: Batch) -> list[Encoded]:
            encodings = tokenizer.encode_batch([text for _, text in batch])
            return [Encoded(np.asarray(e.ids, dtype=np.uint32), np.ones(len(e.ids), dtype=np.uint8)) for e in encodings]

        return encode

    def windows(self, split: Split, plan: Plan, eos: int) -> ShuffledWindows:
        seq_len, seed = plan.model.seq_len, plan.trainer.seed
        drop = plan.data.overlong is Overlong.drop
        if plan.data.packing and plan.data.packing_strategy is PackingStrategy.bfd:
            return WholeDocuments(split, seq_len, seed, eos, plan.data.packing_mask, drop)
        if plan.data.packing:
            return PackedDocuments(split, seq_len, seed, plan.data.packing_mask)
        documents = SeparateDocuments(split, seq_len, seed, eos)
        if drop:
            documents.drop_overlong()
        return documents

    def check(self, plan: Plan, meta: CacheMeta) -> None:
        """Every token of a text document is a target."""

    def report(self, plan: Plan, meta: CacheMeta, train_split: Split, windows: int) -> list[str]:
        train = meta.splits["train"]
        lines = [f"documents         {train.documents:,} training, {train.tokens:,} tokens ({plan.data.format.value})"]
        held = meta.splits.get("validation")
        if held and held.documents:
            lines.append(f"validation        {held.documents:,} documents, {held.tokens:,} tokens held out")
        lines.append(_packing_line(plan, train_split.starts, windows))
        lines.extend(self.target_lines(plan, meta))
        epochs = plan.trainer.steps * plan.batch.global_batch / windows
        lines.append(
            f"epochs            {epochs:.2f} over {plan.trainer.steps} steps of {plan.batch.global_batch} windows"
        )
        return lines

    def target_lines(self, plan: Plan, meta: CacheMeta) -> list[str]:
        """What share of the tokens are targets: all of them for text."""
        return []


def _packing_line(plan: Plan, starts: np.ndarray, windows: int) -> str:
    """Packing efficiency: document tokens (not separators or padding) ÷ the slots of the `windows` windows."""
    window = plan.model.seq_len + 1
    lengths = np.diff(starts)  # each document and its end-of-text token
    masked = ", attention inside documents" if plan.data.packing_mask else ""
    whole = plan.data.packing_strategy is PackingStrategy.bfd
    if plan.data.packing and not whole:
        efficiency = (int(starts[-1]) - len(lengths)) / max(int(starts[-1]), 1)
        return f"packing           {windows:,} windows of {window}, efficiency {efficiency:.1%}, 0 truncated{masked}"
    overlong = lengths > window
    dropped = plan.data.overlong is Overlong.drop
    used = np.minimum((lengths[~overlong] if dropped else lengths) - 1, window)
    efficiency = used.sum() / max(windows * window, 1)
    fate = "dropped (data.overlong=drop)" if dropped else "truncated"
    if plan.data.packing:
        how = f"bfd: {windows:,} windows of {window} of whole documents"
    else:
        how, masked = f"off: {windows:,} windows of {window}", ""
    return f"packing           {how}, efficiency {efficiency:.1%}, {int(overlong.sum()):,} {fate}{masked}"
