"""Conversations → (token ids, target flags), exactly as the model will see them at inference: the ids are
those of transformers' `tokenizer.apply_chat_template(messages, tools=tools, tokenize=True)` (its jinja
environment, globals and special tokens), with `strftime_now` giving the date the plan was compiled, so a
restarted or repeated run tokenizes as its first attempt did.

The targets (`data.loss_on=assistant`) are each assistant message's content and the end-of-turn marker the
template writes after it, with what lies between (the turn's tool calls). A template with `{% generation %}`
blocks says so itself (transformers' assistant mask). For the others the replies are found by rendering the
conversation a second time with each reply replaced by a placeholder: the text between placeholders is the
template's own, so walking both renderings side by side puts every reply at its place, whatever the template
trims, moves or repeats elsewhere. The end-of-turn marker is the first special token after the reply
(`<|im_end|>`, `<|eot_id|>`, `</s>`, ...). A reply with no text (a turn of tool calls alone) that the template
writes differently from a placeholder is no target.

`data.format=chat`: a record is `{"messages": [...], "tools": [...]}` (tools optional) or
`{"prompt": ..., "completion": ...}` (ShareGPT and alpaca rows read as these, `shapes`):
message lists rendered as one conversation with the completion's messages as targets, or plain strings
joined without a template with the completion as the target.
"""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.tokenizer import MAX_RENDERED
from entrypoint.trainer.data import shapes
from entrypoint.trainer.data.base import Batch, CacheMeta, Encoded, TargetsError
from entrypoint.trainer.data.text import TextFormat

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
PLACEHOLDER = "\ue000dockyard-reply-{}\ue001"
"""Stands in for a reply's text: private-use characters, which no template trims, splits or escapes."""
PLACEHOLDERS = re.compile("\ue000dockyard-reply-\\d+\ue001")
WHITESPACE_TRIMS: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    str.strip,
    str.lstrip,
    str.rstrip,
    lambda s: s.strip("\n"),
    lambda s: s.lstrip("\n"),
    lambda s: s.rstrip("\n"),
)
"""The forms in which templates write a reply: as it is, or trimmed (`| trim`, `.strip()`, `.lstrip('\\n')`)."""


class ChatRecordError(ValueError):
    """A record the template refuses (its own `raise_exception`) or whose replies cannot be placed."""


@dataclass(frozen=True)
class Rendering:
    """A record's text and where its targets are, before tokenization (which runs on a batch at once)."""

    text: str
    spans: list[tuple[int, int]] | None
    """The replies' characters; None: every token is a target (`data.loss_on=all`)."""
    last_is_reply: bool = True
    masked: tuple[list[int], list[int]] | None = None
    """transformers' ids and assistant mask, for a template with `{% generation %}` blocks."""


def conversation(record: dict) -> tuple[list[dict], list[dict] | None, int]:
    """(messages, tools, first completion message): a prompt/completion row as one conversation whose targets
    start at the completion."""
    if "messages" in record:
        return record["messages"], record.get("tools"), 0
    prompt, completion = record["prompt"], record["completion"]
    return [*prompt, *completion], record.get("tools"), len(prompt)


class ChatEncoder:
    """One tokenizer folder's chat rendering and targets; `today` is what `strftime_now` reads."""

    def __init__(self, folder: Path, loss_on: LossOn, today: date) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.loss_on = loss_on
        midnight = datetime(today.year, today.month, today.day)

        def strftime_now(format: str) -> str:
            return midnight.strftime(format)

        self.strftime_now = strftime_now
        special = [i for i, token in self.tokenizer.added_tokens_decoder.items() if token.special]
        self.is_special = np.zeros(len(self.tokenizer), dtype=bool)
        self.is_special[special] = True

    def encode(self, record: dict) -> Encoded:
        return self.tokenize([self.render(record)])[0]

    def render(self, record: dict) -> Rendering:
        """The record's text as the template writes it, with its targets' places (raises ChatRecordError)."""
        if isinstance(record.get("prompt"), str):
            text = record["prompt"] + record["completion"]
            return Rendering(text, [(len(record["prompt"]), len(text))])
        messages, tools, first = conversation(record)
        if self.loss_on is LossOn.all:
            return Rendering(self._apply(messages, tools, tokenize=False), None)
        last_is_reply = len(messages) > first and messages[-1].get("role") == "assistant"
        if GENERATION_TAG.search(self.tokenizer.get_chat_template(tools=tools)) and first == 0:
            out = self._apply(messages, tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            return Rendering("", [], last_is_reply, masked=(out["input_ids"], out["assistant_masks"]))
        return Rendering(*self._found_replies(messages, tools, first), last_is_reply)

    def tokenize(self, renderings: list[Rendering]) -> list[Encoded]:
        """Renderings → ids and targets, the texts encoded in one batch (as `apply_chat_template` encodes one)."""
        texts = [r.text for r in renderings if r.masked is None]
        encoded = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True) if texts else None
        encodings = iter(encoded.encodings if encoded else [])
        return [self._encoded(r, None if r.masked else next(encodings)) for r in renderings]

    def _encoded(self, rendering: Rendering, encoding) -> Encoded:
        if rendering.masked is not None:
            ids, targets = (np.asarray(values, dtype=np.int64) for values in rendering.masked)
        else:
            ids = np.asarray(encoding.ids, dtype=np.int64)
            offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            if rendering.spans is None:
                return Encoded(ids.astype(np.uint32), np.ones(len(ids), dtype=np.uint8))
            targets = self._span_targets(ids, offsets, rendering.spans, len(rendering.text))
        trained = np.flatnonzero(targets)
        ends_turn = bool(len(trained)) and bool(self.is_special[ids[trained[-1]]])
        eos_target = rendering.last_is_reply and not ends_turn
        return Encoded(ids.astype(np.uint32), targets.astype(np.uint8), eos_target)

    def _span_targets(self, ids: np.ndarray, offsets: np.ndarray, spans: list[tuple[int, int]], length: int):
        """1 on each token of a span (one that starts on the space before a reply is in it), and on what the
        template writes after the reply in its turn (tool calls) through the first special token, its marker."""
        starts, ends = offsets[:, 0], offsets[:, 1]
        targets = np.zeros(len(ids), dtype=np.uint8)
        special = self.is_special[ids]
        for (begin, end), limit in zip(spans, [b for b, _ in spans[1:]] + [length], strict=True):
            targets[(starts < end) & (ends > begin)] = 1
            marker = np.flatnonzero(special & (starts >= end) & (starts < limit))
            if len(marker):
                targets[(starts >= end) & (starts <= starts[marker[0]])] = 1
        return targets

    def _apply(self, messages: list[dict], tools: list[dict] | None, **options):
        from jinja2 import TemplateError  # transformers' environment raises it; loaded with transformers

        with self._dated(self.tokenizer.get_chat_template(tools=tools)):
            try:
                rendered = self.tokenizer.apply_chat_template(messages, tools=tools, **options)
            except TemplateError as error:
                raise ChatRecordError(f"the chat template raised: {error}") from None
        if isinstance(rendered, str) and len(rendered) > MAX_RENDERED:
            raise ChatRecordError(f"the chat template writes {len(rendered):,} characters, above {MAX_RENDERED:,}")
        return rendered

    @contextmanager
    def _dated(self, template: str) -> Iterator[None]:
        """transformers' compiled template (cached by its text) with `strftime_now` reading the plan's date, for
        the length of one rendering (transformers turns a function passed as a template argument into text)."""
        from transformers.utils.chat_template_utils import _compile_jinja_template

        names = _compile_jinja_template(template).globals.maps[0]  # the template's own, before the environment's
        names["strftime_now"] = self.strftime_now
        try:
            yield
        finally:
            del names["strftime_now"]

    def _found_replies(self, messages: list[dict], tools: list[dict] | None, first: int):
        """The conversation's text and the span of each assistant reply (from message `first` on) in it."""
        replies = [i for i, m in enumerate(messages) if i >= first and m.get("role") == "assistant"]
        text = self._apply(messages, tools, tokenize=False)
        spans = _aligned(text, self._skeleton(messages, tools, replies, skip_empty=False), messages, replies)
        if spans is None:  # the template writes an empty reply differently (or not at all)
            with_text = [i for i in replies if _text(messages[i])]
            spans = _aligned(text, self._skeleton(messages, tools, with_text, skip_empty=True), messages, with_text)
        if spans is None:
            raise ChatRecordError(
                "the chat template writes the assistant's replies in a form dockyard cannot place in the rendering"
            )
        return text, spans

    def _skeleton(self, messages: list[dict], tools: list[dict] | None, replies: list[int], skip_empty: bool) -> str:
        marked = list(messages)
        for number, index in enumerate(replies):
            if not skip_empty or _text(messages[index]):
                marked[index] = {**messages[index], "content": PLACEHOLDER.format(number)}
        return self._apply(marked, tools, tokenize=False)


def _text(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _aligned(text: str, skeleton: str, messages: list[dict], replies: list[int]) -> list[tuple[int, int]] | None:
    """The character span of each reply in `text`, walking `skeleton` (the same rendering with placeholders)
    piece by piece; None where the two renderings differ elsewhere than at the replies."""
    pieces = PLACEHOLDERS.split(skeleton)
    if len(pieces) != len(replies) + 1 or not text.startswith(pieces[0]):
        return None
    spans, position = [], len(pieces[0])
    for number, (index, after) in enumerate(zip(replies, pieces[1:], strict=True)):
        last = number == len(replies) - 1
        for trim in WHITESPACE_TRIMS:
            reply = trim(_text(messages[index]))
            end = position + len(reply)
            if text.startswith(reply, position) and (text[end:] == after if last else text.startswith(after, end)):
                spans.append((position, end))
                position = end + len(after)
                break
        else:
            return None
    return spans


CHAT_COLUMNS = ("messages", "tools", "prompt", "completion", shapes.SHAREGPT_COLUMN, *shapes.ALPACA_COLUMNS)
MIN_TARGET_SHARE = 0.01
"""The least share of a chat split's tokens that must be targets with `data.loss_on=assistant`."""


class ChatFormat(TextFormat):
    """Conversations, rendered by the tokenizer's chat template; windows cut and reported as text's are."""

    name = DataFormat.chat

    def columns(self, field: str) -> tuple[str, ...]:
        return CHAT_COLUMNS

    def record(self, row: dict, field: str, where: str) -> dict:
        """The record's conversation columns, with the shapes checked (None is a column this row leaves empty)."""
        found = {name: row[name] for name in CHAT_COLUMNS if row.get(name) is not None}
        if isinstance(found.get("messages"), list):
            return {name: found[name] for name in ("messages", "tools") if name in found}
        prompt, completion = found.get("prompt"), found.get("completion")
        if isinstance(prompt, str | list) and type(prompt) is type(completion):
            return {name: found[name] for name in ("prompt", "completion", "tools") if name in found}
        other = shapes.sharegpt(row, where) or shapes.alpaca(row)
        if other is not None:
            return other
        raise ValueError(
            f"{where}: no conversation: a 'messages' list, or 'prompt' and 'completion' (both text or both lists), "
            "or ShareGPT's 'conversations', or alpaca's 'instruction' and 'output'"
        )

    def encoder(self, folder: Path, loss_on: LossOn, today: date) -> Callable[[Batch], list[Encoded]]:
        chat = ChatEncoder(folder, loss_on, today)
        return lambda batch: chat.tokenize([rendered(chat, where, record) for where, record in batch])

    def check(self, plan: Plan, meta: CacheMeta) -> None:
        """A chat split whose targets are (nearly) none trains nothing while reporting a loss: refused before the
        first step, naming the cause."""
        if plan.data.loss_on is not LossOn.assistant:
            return
        for name, counts in meta.splits.items():
            if counts.documents and counts.targets < MIN_TARGET_SHARE * counts.tokens:
                raise TargetsError(
                    f"data.loss_on=assistant: the {name} split has {counts.targets:,} target tokens of "
                    f"{counts.tokens:,} (under {MIN_TARGET_SHARE:.0%}): its conversations have (almost) no assistant "
                    "replies the chat template writes; check the records' roles and the tokenizer's chat template, "
                    "or set data.loss_on=all"
                )

    def target_lines(self, plan: Plan, meta: CacheMeta) -> list[str]:
        train = meta.splits["train"]
        masked = 1 - train.targets / max(train.tokens, 1)
        return [f"loss on           {plan.data.loss_on.value} tokens: {masked:.1%} of tokens masked out"]


def rendered(chat: ChatEncoder, where: str, record: dict) -> Rendering:
    try:
        return chat.render(record)
    except ChatRecordError as error:
        raise ChatRecordError(f"{where}: {error}") from None
