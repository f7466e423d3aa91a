"""A chat plan's templates, checked at plan time instead of on every node: each must compile, and the first
records of a local JSONL file must render (a template's own `raise_exception`, like Gemma's `System role not
supported`, fails here naming the file and the record). The environment is transformers' own
(`chat_template_utils`): a sandbox with `trim_blocks`, `lstrip_blocks`, loop controls, its `{% generation %}`
block and `raise_exception`; the host does not install transformers, and only a refusal is looked for here
(the nodes render with transformers itself).

A template is a program from a file the user was handed: each rendering here runs under a time limit (a line
tracer on this thread checks the clock) and a size limit (the text is counted as it is written, and a string
or list repeated past the limit is refused before it is made), so a template that would loop for ever or
write a gigabyte per record is one line, not a stall or a traceback. With no local JSONL file, a one-turn
conversation is rendered instead.
"""

import gzip
import itertools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from compiler.core.grammar import shown
from compiler.spec.errors import ConfigError
from compiler.spec.tokenizer import MAX_RENDERED, TokenizerFacts


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`, which marks the assistant's text; here only parsed."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


FIRST_RECORDS = 16
"""The records of the first JSONL file rendered at plan time."""
RENDER_SECONDS = 2.0
"""The longest one record's rendering may take (the real templates take a millisecond)."""
SAMPLE = [{"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "Four."}]


class TemplateRaised(Exception):
    """The template's own `raise_exception(message)`."""


class TemplateUnbounded(Exception):
    """A rendering past `RENDER_SECONDS` or `MAX_RENDERED`."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


class LimitedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with `*` and `**` unable to make a value past the size limit."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator: str, left, right):
        sized = (str, list, tuple)
        if operator == "*" and isinstance(right, sized) and isinstance(left, int):
            left, right = right, left
        if operator == "*" and isinstance(left, sized) and isinstance(right, int) and len(left) * right > MAX_RENDERED:
            raise TemplateUnbounded(f"repeats a value past {MAX_RENDERED:,} characters")
        if operator == "**" and isinstance(right, int | float) and abs(right) > 1024:
            raise TemplateUnbounded(f"raises a number to the power {right}")
        return super().call_binop(context, operator, left, right)


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Every line of Python the rendering runs on this thread first checks the clock (jinja compiles a
    template to Python, so each loop's step is a line)."""
    end, previous = time.monotonic() + seconds, sys.gettrace()

    def tracer(frame, event, arg):
        if time.monotonic() > end:
            raise TemplateUnbounded(f"runs past {seconds:g} s for one record")
        return tracer

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)


def render_limited(template: jinja2.Template, **context) -> str:
    """The template's text for `context`, or `TemplateUnbounded` past the time or the size limit."""
    written, chunks = 0, []
    with _deadline(RENDER_SECONDS):
        for chunk in template.generate(**context):
            written += len(chunk)
            if written > MAX_RENDERED:
                raise TemplateUnbounded(f"writes more than {MAX_RENDERED:,} characters for one record")
            chunks.append(chunk)
    return "".join(chunks)


def check_templates(facts: TokenizerFacts, key: str) -> None:
    for name, template in facts.chat_templates.items():
        check_template(key, f"its chat template {name!r}", template)


def check_template(key: str, what: str, template: str) -> None:
    """The template compiles in transformers' environment."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    try:
        environment.parse(template)
    except jinja2.TemplateSyntaxError as error:
        where = "data.chat_template" if key == "data.chat_template" else "chat_template.jinja or tokenizer_config.json"
        raise ConfigError(
            key, f"{what} does not compile: {error.message} (line {error.lineno})", f"fix the template in {where}"
        ) from None


def check_first_records(facts: TokenizerFacts, sources: list[Path]) -> None:
    """The first records of the first `.jsonl` or `.jsonl.gz` source (a one-turn sample without one),
    rendered as a conversation without tools by the default template (Parquet and datasets are read on the
    nodes only), each within the time and size limits."""
    if facts.chat_template is None:
        return
    first = next((p for p in sources if p.name.endswith((".jsonl", ".jsonl.gz"))), None)
    environment = LimitedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock])
    environment.globals["raise_exception"] = _raise_exception
    template = environment.from_string(facts.chat_template)
    special = {"bos_token": facts.bos_token or "", "eos_token": facts.eos_token or ""}
    for where, messages in _conversations(first):
        try:
            render_limited(template, messages=messages, add_generation_prompt=False, **special)
        except TemplateRaised as error:
            if first is None:
                continue  # the sample is no record of the user's
            raise ConfigError(
                "data.path",
                f"{where}: the chat template raised: {shown(str(error))}",
                "change the record, or use a tokenizer whose template accepts it",
            ) from None
        except (TemplateUnbounded, OverflowError, MemoryError, RecursionError) as error:
            problem = (
                error if isinstance(error, TemplateUnbounded) else f"fails ({type(error).__name__}: {shown(error)})"
            )
            raise ConfigError(
                "data.tokenizer",
                f"its chat template {problem} ({where})",
                f"use a template that renders a record within {RENDER_SECONDS:g} s and {MAX_RENDERED:,} characters",
            ) from None
        except (jinja2.TemplateError, TypeError, ValueError, LookupError):
            continue  # what only transformers' own rendering judges (the node reports it)


def _conversations(first: Path | None) -> Iterator[tuple[str, list]]:
    """(where, messages) of the first records of `first`, or of the sample conversation."""
    if first is None:
        yield "a one-turn sample conversation", SAMPLE
        return
    opener = gzip.open if first.name.endswith(".gz") else open
    with opener(first, "rt", encoding="utf-8") as stream:
        lines = itertools.islice((line for line in stream if line.strip()), FIRST_RECORDS)
        for number, line in enumerate(lines, 1):
            messages = _messages(line)
            if messages is not None:  # not a conversation: the node names it
                yield f"{first}, record {number}", messages


def _messages(line: str) -> list | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    if isinstance(row.get("messages"), list):
        return row["messages"]
    prompt, completion = row.get("prompt"), row.get("completion", row.get("chosen"))  # a pair: its chosen side
    return [*prompt, *completion] if isinstance(prompt, list) and isinstance(completion, list) else None
