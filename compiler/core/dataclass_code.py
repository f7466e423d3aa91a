"""The methods `dataclasses` writes, kept compiled between commands, as Python keeps a module's bytecode.

Python 3.11 writes a dataclass's `__init__`, `__repr__` and `__eq__` (a frozen one's `__setattr__`,
`__delattr__` and `__hash__` too) as source text and compiles that text each time the class is made: every
command compiles them again for Hydra's, its plug-ins' and dockyard's dataclasses, a sixth of what
`dockyard plan` executes. `install` gives the `dataclasses` module an `exec` that looks each text up first
among the code compiled from it by an earlier command (`$DOCKYARD_HOME/cache/code`); the text is the key, so a
class gets the very code that compiling its text makes. `save` writes the code this command used, only where
it compiled any (a new or changed class): the file holds what one command makes, not every class ever seen.

The file is named by the interpreter's bytecode tag and magic number (as a `__pycache__` file is), written
whole (a rename), and starts with a checksum: a file cut short or overwritten is compiled again, so a damaged
cache costs time, never a wrong method. The folder (mode 700) is the user's own, like their bytecode caches:
what is there is run.
"""

import dataclasses
import hashlib
import marshal
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any

from compiler.core.home import cache, write_whole

CHECKSUM_BYTES = 16


class CompiledMethods:
    """The `exec` that `dataclasses` calls, and the code this process used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known = _load(path)
        self.used: dict[str, CodeType] = {}
        self.compiled = 0
        """Texts compiled by this process (none once the file holds every class the command makes)."""

    def exec(self, source: Any, scope: dict[str, Any] | None = None, names: dict[str, Any] | None = None) -> None:
        if isinstance(source, str):
            code = self.known.get(source)
            if code is None:
                code = self.known[source] = compile(source, "<string>", "exec", dont_inherit=True)
                self.compiled += 1
            self.used[source] = code
            source = code
        exec(source, scope, names)

    def save(self) -> None:
        """Write the code this process used, where it compiled any (a failure to write only costs time)."""
        if not self.compiled:
            return
        content = marshal.dumps(self.used)
        try:
            write_whole(self.path, _checksum(content) + content)
        except OSError:
            return


def install() -> CompiledMethods:
    """From now on, `dataclasses` compiles only what no earlier command compiled."""
    methods = CompiledMethods(cache("code") / f"{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}.marshal")
    dataclasses.exec = methods.exec  # type: ignore[attr-defined]
    return methods


def _load(path: Path) -> dict[str, CodeType]:
    try:
        content = path.read_bytes()
    except OSError:
        return {}
    checksum, body = content[:CHECKSUM_BYTES], content[CHECKSUM_BYTES:]
    return marshal.loads(body) if checksum == _checksum(body) else {}


def _checksum(content: bytes) -> bytes:
    return hashlib.blake2b(content, digest_size=CHECKSUM_BYTES).digest()
