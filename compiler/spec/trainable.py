"""`model.trainable_parameters`: the regular expressions that choose which of a checkpoint's parameters train in
a full fine-tune (axolotl's `unfrozen_parameters`), read as axolotl reads them, so that a recipe's patterns choose
the same names here: a period is a literal period unless a `+` follows it (`layers.2[0-9]+.mlp` is
`layers\\.2[0-9]+\\.mlp`, while `.+` still means any characters), and a pattern matches from the start of a
name (`re.match`), not necessarily to its end. The planner checks the patterns against the checkpoint's tensor
names and the trainer against the model's parameter names, with this one reading.
"""

import re
from collections.abc import Iterable

from compiler.spec.errors import shown

KEY = "model.trainable_parameters"
RANGE = re.compile(r".\[[0-9]*(?::[0-9]*)?\]$")
"""axolotl's optional row range after a pattern (`^model.embed_tokens.weight$[:32000]`, `lm_head.weight$[7]`):
trains those rows of the tensor only."""


def name_pattern(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled as axolotl reads it; ValueError for a row range (dockyard trains whole tensors) or
    an expression `re` cannot compile."""
    if RANGE.search(pattern):
        raise ValueError(f"{shown(pattern)} ends with a row range, and dockyard trains whole tensors")
    try:
        return re.compile(re.sub(r"\.(?!\+)", r"\\.", pattern))
    except re.error as error:
        raise ValueError(f"{shown(pattern)} is not a regular expression: {error}") from None


def chosen(patterns: Iterable[str], names: Iterable[str]) -> tuple[set[str], list[str]]:
    """The names some pattern matches, and the patterns that match none of `names`."""
    compiled = {pattern: name_pattern(pattern) for pattern in patterns}
    names = list(names)
    matched = {pattern: {name for name in names if regex.match(name)} for pattern, regex in compiled.items()}
    return set().union(*matched.values()), [pattern for pattern, hits in matched.items() if not hits]
