"""Every file a user hands dockyard is hostile until checked: a checkpoint's config.json, a tokenizer's
files, a run's record, the metrics and restarts its nodes wrote. One reader for all of them, on the host and
on the nodes (standard library only), so a bad file is the same one line everywhere.

The reader opens regular files only: a FIFO would block forever and a device never ends, so the file is
opened without blocking and its type checked on the open descriptor (no race with a swap). Symbolic links
are followed (Hugging Face's cache links each snapshot's files into `../../blobs`), but what they reach must
be a regular file too. It reads at most `limit` bytes, decodes strict UTF-8, and parses JSON whose nesting
the interpreter can follow; every failure is a `FileError` naming the config key and the file.
"""

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from compiler.spec.errors import ConfigError, as_json

SMALL_FILE = 4 * 2**20
"""A config, a record, a template: far below this."""
LARGE_FILE = 256 * 2**20
"""A tokenizer.json (tens of MiB for large vocabularies) or a metrics log of a long run."""


class FileError(ConfigError):
    """A file given through `key` that cannot be read or does not hold what it must; `path` is the file."""

    def __init__(self, key: str, path: Path | str, problem: str, fix: str = "fix or replace the file") -> None:
        super().__init__(key, f"{path} {problem}", fix)
        self.path = Path(path)


def read_bytes(path: Path, key: str, limit: int = SMALL_FILE) -> bytes:
    """At most `limit` + 1 bytes of the regular file `path` (a link is followed to one)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        problem = "is a link to nothing" if os.path.islink(path) else "does not exist"
        raise FileError(key, path, problem, "point it at an existing file") from None
    except OSError as error:
        raise FileError(key, path, f"cannot be opened ({error.strerror})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise FileError(key, path, f"is {kind}", "give a regular file")
    with os.fdopen(descriptor, "rb") as file:
        try:
            return file.read(limit + 1)
        except OSError as error:
            raise FileError(key, path, f"cannot be read ({error.strerror})") from None


def read_text(path: Path, key: str, limit: int = SMALL_FILE) -> str:
    """The file as UTF-8 text."""
    return decoded(read_bytes(path, key, limit), key, path, limit)


def decoded(data: bytes, key: str, path: Path | str, limit: int = SMALL_FILE) -> str:
    """Bytes read from `path` (a file, an object, a download of at most `limit` + 1 bytes) as UTF-8 text."""
    if len(data) > limit:
        raise FileError(key, path, f"is larger than {limit // 2**20} MiB", "give the file it should be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileError(key, path, f"is not UTF-8 text (byte {error.start})", "save it as UTF-8") from None


def parse_json(text: str, key: str, path: Path | str) -> Any:
    """JSON text; NaN and the infinities, which JSON does not have, are refused too."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise FileError(key, path, f"is not JSON ({error.msg}, line {error.lineno})") from None
    except RecursionError:
        raise FileError(key, path, "nests its values too deep to read") from None
    except ValueError as error:
        raise FileError(key, path, str(error)) from None


def _no_constant(name: str) -> float:
    raise ValueError(f"holds {name}, which JSON does not have")


def read_json(path: Path, key: str, limit: int = SMALL_FILE) -> Any:
    return parse_json(read_text(path, key, limit), key, path)


def read_json_object(path: Path, key: str, limit: int = SMALL_FILE) -> dict[str, Any]:
    return json_object(read_text(path, key, limit), key, path)


def json_object(text: str, key: str, path: Path | str) -> dict[str, Any]:
    """JSON text that must hold an object (a config, a record)."""
    value = parse_json(text, key, path)
    if not isinstance(value, dict):
        raise FileError(key, path, f"holds a JSON {type(value).__name__}, not an object")
    return value


def read_json_lines(path: Path, key: str, limit: int = LARGE_FILE) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines log, and how many lines were skipped: a node killed mid-write leaves
    half a line, which must not hide the lines before it."""
    found, skipped = [], 0
    for line in read_text(path, key, limit).splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            found.append(value)
        else:
            skipped += 1
    return found, skipped


def integer(
    values: dict[str, Any], name: str, key: str, path: Path | str, *, minimum: int = 1, maximum: int = 2**63 - 1
) -> int:
    """`values[name]` as a whole number from `minimum` to `maximum`. JSON's `64.0` is refused, not rounded:
    transformers' configs and the `tokenizers` library refuse it too, so a file dockyard reads loads there."""
    value = values.get(name)
    if isinstance(value, float) and value.is_integer():
        fix = f"write {name}: {int(value)}" if abs(value) < 2**63 else "fix or replace the file"
        problem = f"gives {name} = {as_json(value)}, written with a decimal point, which transformers refuses"
        raise FileError(key, path, problem, fix)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        if name not in values:
            raise FileError(key, path, f"has no {name}")
        raise FileError(key, path, f"gives {name} = {as_json(value)}, not a whole number ≥ {minimum}")
    if value > maximum:
        raise FileError(key, path, f"gives {name} = {value:,}, above {maximum:,}, the most dockyard plans")
    return value


def optional_object(values: dict[str, Any], name: str, key: str, path: Path | str) -> dict[str, Any]:
    """`values[name]` as a JSON object, `{}` where it is absent or null (`rope_parameters`, `rope_scaling`)."""
    value = values.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FileError(key, path, f"gives {name} = {as_json(value)}, not an object or null")
    return value


def number(values: dict[str, Any], name: str, key: str, path: Path | str, *, default: float) -> float:
    """`values[name]` as a finite positive number, `default` where it is absent or null."""
    value = values.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise FileError(key, path, f"gives {name} = {as_json(value)}, not a positive number")
    return float(value)
