"""`data.format=text`: plain documents, a string column (`data.field`) or a whole .txt file each, encoded with the
`tokenizers` library's `tokenizer.json` (`encode_batch`, in Rust, on all the node's cores); every token is a
target. Also the base of the chat format, which cuts and reports its windows the same way."""

from collections.abc import Callable
from datetime import date
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn, Overlong
from compiler.spec.tokenizer import TOKENIZER_FILE
from entrypoint.trainer.data.base import Batch, CacheMeta, Encoded
from entrypoint.trainer.data.windows import PackedDocuments, SeparateDocuments, ShuffledWindows, Split


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
        if plan.data.packing:
            return PackedDocuments(split, seq_len, seed, plan.data.packing_mask)
        documents = SeparateDocuments(split, seq_len, seed, eos)
        if plan.data.overlong is Overlong.drop:
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
        lines.append(_packing_line(plan, train_split.starts))
        lines.extend(self.target_lines(plan, meta))
        epochs = plan.trainer.steps * plan.batch.global_batch / windows
        lines.append(
            f"epochs            {epochs:.2f} over {plan.trainer.steps} steps of {plan.batch.global_batch} windows"
        )
        return lines

    def target_lines(self, plan: Plan, meta: CacheMeta) -> list[str]:
        """What share of the tokens are targets: all of them for text."""
        return []


def _packing_line(plan: Plan, starts: np.ndarray) -> str:
    """Packing efficiency: document tokens (not separators or padding) ÷ the slots of the windows."""
    window = plan.model.seq_len + 1
    lengths = np.diff(starts)  # each document and its end-of-text token
    if plan.data.packing:
        windows = (int(starts[-1]) - 1) // plan.model.seq_len
        efficiency = (int(starts[-1]) - len(lengths)) / max(int(starts[-1]), 1)
        masked = ", attention inside documents" if plan.data.packing_mask else ""
        return f"packing           {windows:,} windows of {window}, efficiency {efficiency:.1%}, 0 truncated{masked}"
    overlong = lengths > window
    if plan.data.overlong is Overlong.drop:
        lengths = lengths[~overlong]
    used = np.minimum(lengths - 1, window)
    efficiency = used.sum() / max(len(lengths) * window, 1)
    fate = "dropped (data.overlong=drop)" if plan.data.overlong is Overlong.drop else "truncated"
    return (
        f"packing           off: {len(lengths):,} windows of {window}, efficiency {efficiency:.1%}, "
        f"{int(overlong.sum()):,} {fate}"
    )
