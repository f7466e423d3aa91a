"""A chat plan's templates, compiled at plan time: a template that does not compile fails here, naming the
tokenizer, instead of on every node. The environment is transformers' (`chat_template_utils`): a sandbox with
`trim_blocks`, `lstrip_blocks`, loop controls and its `{% generation %}` block; the host does not install
transformers, and compiling needs none of its globals.
"""

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from compiler.spec.errors import ConfigError
from compiler.spec.tokenizer import TokenizerFacts


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`, which marks the assistant's text; here only parsed."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


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
