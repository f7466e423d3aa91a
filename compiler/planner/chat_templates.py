"""A chat plan's templates, checked at plan time instead of on every node: each must compile, and the first
records of a local JSONL file must render (a template's own `raise_exception`, like Gemma's `System role not
supported`, fails here naming the file and the record). The environment is transformers' own
(`chat_template_utils`): a sandbox with `trim_blocks`, `lstrip_blocks`, loop controls, its `{% generation %}`
block and `raise_exception`; the host does not install transformers, and only a refusal is looked for here
(the nodes render with transformers itself).
"""

import gzip
import itertools
import json
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from compiler.core.grammar import shown
from compiler.spec.errors import ConfigError
from compiler.spec.tokenizer import TokenizerFacts


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`, which marks the assistant's text; here only parsed."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


FIRST_RECORDS = 16
"""The records of the first JSONL file rendered at plan time."""


class TemplateRaised(Exception):
    """The template's own `raise_exception(message)`."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def check_templates(facts: TokenizerFacts, key: str) -> None:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    for name, template in facts.chat_templates.items():
        try:
            environment.parse(template)
        except jinja2.TemplateSyntaxError as error:
            raise ConfigError(
                key,
                f"its chat template {name!r} does not compile: {error.message} (line {error.lineno})",
                "fix the template in chat_template.jinja or tokenizer_config.json",
            ) from None


def check_first_records(facts: TokenizerFacts, sources: list[Path]) -> None:
    """The first records of the first `.jsonl` or `.jsonl.gz` source, rendered as a conversation without tools
    by the default template (Parquet and datasets are read on the nodes only)."""
    first = next((p for p in sources if p.name.endswith((".jsonl", ".jsonl.gz"))), None)
    if first is None or facts.chat_template is None:
        return
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock])
    environment.globals["raise_exception"] = _raise_exception
    template = environment.from_string(facts.chat_template)
    special = {"bos_token": facts.bos_token or "", "eos_token": facts.eos_token or ""}
    opener = gzip.open if first.name.endswith(".gz") else open
    with opener(first, "rt", encoding="utf-8") as stream:
        lines = itertools.islice((line for line in stream if line.strip()), FIRST_RECORDS)
        for number, line in enumerate(lines, 1):
            messages = _messages(line)
            if messages is None:
                continue  # not a conversation: the node names it
            try:
                template.render(messages=messages, add_generation_prompt=False, **special)
            except TemplateRaised as error:
                raise ConfigError(
                    "data.path",
                    f"{first}, record {number}: the chat template raised: {shown(str(error))}",
                    "change the record, or use a tokenizer whose template accepts it",
                ) from None
            except (jinja2.TemplateError, TypeError, ValueError, LookupError):
                continue  # what only transformers' own rendering judges (the node reports it)


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
