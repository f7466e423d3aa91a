"""What output may carry where it goes: escape codes and colour only on a terminal, and colour never with
NO_COLOR set (no-color.org), so logs, files and pipes get plain text."""

import os
import re
from collections.abc import Mapping
from typing import IO

ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
"""ANSI control sequences (CSI: colours, cursor moves) and the two-character escapes."""


def is_terminal(out: IO[str]) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def wants_colour(out: IO[str], environ: Mapping[str, str] = os.environ) -> bool:
    return is_terminal(out) and not environ.get("NO_COLOR")


def plain(line: str) -> str:
    """A line as a file shows it: no escape codes, and of what a progress bar redraws with carriage returns
    only its last drawing (a line that ends in one is drawn over: nothing)."""
    text = ESCAPE.sub("", line)
    if text.endswith("\r"):
        return ""
    end = "\n" if text.endswith("\n") else ""
    return text.rstrip("\r\n").rsplit("\r", 1)[-1] + end


COLOURS = {"green": 32, "red": 31, "yellow": 33}


def coloured(text: str, colour: str, out: IO[str]) -> str:
    return f"\x1b[{COLOURS[colour]}m{text}\x1b[0m" if wants_colour(out) else text
