"""One error family for everything a user can get wrong.

Every error names the config key it is about and says what to change, so the CLI can print it in one
line with exit status 2 and no traceback.
"""

import difflib
import json
import re
from collections.abc import Iterable


class ConfigError(Exception):
    """A config value that cannot work. `key` is the dotted path (`parallelism.tp`), `fix` what to do."""

    def __init__(self, key: str, message: str, fix: str = "") -> None:
        self.key = key
        self.message = message
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The error in one line: control characters a value brought into the message (a newline in an
        override) are shown escaped, so they can neither break the line nor forge another."""
        text = f"{self.key}: {self.message}"
        return printable(f"{text}; {self.fix}" if self.fix else text)


def printable(text: str) -> str:
    """`text` with its control characters shown escaped, so it stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


CREDENTIALS = re.compile(r"[^\s/@:]+:[^\s/@]*@")
"""`user:password@` before a host, as a registry or URL may carry it."""


def shown(value: object) -> str:
    """A value as a message shows it (from an override, a file, a platform): quoted, escapes visible, long
    ones cut, credentials masked. Every value a message echoes goes through here."""
    text = repr(CREDENTIALS.sub("***@", str(value)))
    return text if len(text) <= 80 else f"{text[:60]}...' ({len(str(value))} characters)"


def withheld(value: object) -> str:
    """What a message says instead of a value where a secret belongs or may have been pasted by mistake (a
    token where a secret's reference should be): its length only."""
    return f"the value given ({len(str(value))} characters, not shown: it may be a secret)"


def as_json(value: object) -> str:
    """A value read from a JSON file, as JSON writes it (so a string "2" and a number 2 differ), in the same
    printable, cut and masked form as `shown`."""
    text = printable(CREDENTIALS.sub("***@", json.dumps(value, ensure_ascii=False, default=str)))
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


class PlatformError(Exception):
    """A platform's refusal or failure that no config key fixes (a server error, a deletion that did not
    finish in time): printed in one line with exit status 1, no traceback."""

    def one_line(self) -> str:
        return printable(str(self))


class UnknownNameError(ConfigError):
    """A name that is not in a fixed set (instance types, config options); suggests the nearest ones."""

    def __init__(self, key: str, what: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        nearest = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        fix = f"did you mean {' or '.join(nearest)}?" if nearest else f"choose one of: {', '.join(known)}"
        super().__init__(key, f"unknown {what} '{name}'", fix)
        self.nearest = nearest


class DegreeError(ConfigError):
    """Parallel degrees or batch sizes that do not multiply out."""


class UnsupportedError(ConfigError):
    """A valid request that dockyard or the chosen target cannot do (yet)."""
