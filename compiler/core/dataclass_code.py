"""The methods `dataclasses` writes, kept compiled between commands, as Python keeps a module's bytecode.

Python 3.11 writes a dataclass's `__init__`, `__repr__` and `__eq__` (a frozen one's `__setattr__`,
`__delattr__` and `__hash__` too) as source text and compiles that text each time the class is made: every
command compiles them again for Hydra's, its plug-ins' and dockyard's dataclasses, a sixth of what
`dockyard plan` executes. `install` gives the `dataclasses` module an `exec` that looks each text up first
among the code compiled from it by earlier commands (`$DOCKYARD_HOME/cache/code`); the text is the key, so a
class gets the very code that compiling its text makes. A command that compiled any text (a class new to the
file, or changed) writes the file again with it. The file keeps what other commands compiled (each verb makes
classes of its own), until it holds more than MAX_METHODS, most of them then of classes since changed: it
starts again from what the writing command used.

The file is named by the interpreter's bytecode tag and magic number (as a `__pycache__` file is), written
whole (a rename), and starts with a checksum (CRC-32: every command reads the file, and a CRC reads it 3 times
faster than blake2b): a file cut short or overwritten is compiled again, so a damaged cache costs time, never
a wrong method. The folder (mode 700) is the user's own, like their bytecode caches: what is there is run.
"""

import dataclasses
import marshal
import sys
import zlib
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

from compiler.core.home import cache, write_whole

FORMAT = 1
"""Part of the file's name: a change to what the file holds makes the old files unreachable."""
CHECKSUM_BYTES = 4
MAX_METHODS = 1000
"""Methods the file keeps: a plan makes about 350, every verb together about 450 (Python 3.11, Hydra 1.3)."""


class CompiledMethods:
    """The `exec` that `dataclasses` calls, and the compiled methods by their text, each kept marshalled: a
    command unmarshals only the methods of the classes it makes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        """None where there is no home folder to keep the file in: every method is compiled, as without it."""
        self.known = _load(path) if path else {}
        self.used: set[str] = set()
        self.compiled = 0
        """Texts compiled by this process (none once the file holds every class the command makes)."""

    def exec(self, source: Any, scope: dict[str, Any] | None = None, names: dict[str, Any] | None = None) -> None:
        if isinstance(source, str):
            marshalled = self.known.get(source)
            if marshalled is None:
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self.known[source] = marshal.dumps(code)
                self.compiled += 1
            else:
                code = marshal.loads(marshalled)
            self.used.add(source)  # once known: `save` may run while another thread makes a class
            source = code
        exec(source, scope, names)

    def save(self) -> None:
        """Write the methods, where this process compiled any (a failure to write only costs time)."""
        if not self.compiled or self.path is None:
            return
        used = tuple(self.used)  # as it is now, should another thread be making a class
        kept = self.known if len(self.known) <= MAX_METHODS else {text: self.known[text] for text in used}
        content = marshal.dumps(kept)
        try:
            write_whole(self.path, _checksum(content) + content)
        except OSError:
            return


def install() -> CompiledMethods:
    """From now on, `dataclasses` compiles only what no earlier command compiled."""
    try:
        path: Path | None = cache("code") / f"{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}-{FORMAT}.marshal"
    except RuntimeError:  # Path.home() finds none (no $HOME, a user without a passwd entry): no cache
        path = None
    methods = CompiledMethods(path)
    dataclasses.exec = methods.exec  # type: ignore[attr-defined]
    return methods


def _load(path: Path) -> dict[str, bytes]:
    try:
        content = path.read_bytes()
    except OSError:
        return {}
    checksum, body = content[:CHECKSUM_BYTES], content[CHECKSUM_BYTES:]
    return marshal.loads(body) if checksum == _checksum(body) else {}


def _checksum(content: bytes) -> bytes:
    return zlib.crc32(content).to_bytes(CHECKSUM_BYTES, "big")
