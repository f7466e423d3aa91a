"""Hostile input through the real CLI: a corpus of cases kept as data (tests/data/hostile.txt) and a
Hypothesis property over random and hostile overrides. Every run ends in a plan in a fresh folder of its
own, or in one line naming the config key, exit status 2, with nothing left behind; no traceback, and the
canary secret from the environment never printed or written."""

import codecs
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import assert_canary_nowhere, assert_clean, invoke

CORPUS = Path(__file__).parent / "data" / "hostile.txt"
DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def corpus() -> list[tuple[str, str, list[str]]]:
    cases = []
    for line in CORPUS.read_text().splitlines():
        if line and not line.startswith("#"):
            verb, key, *args = line.split("\t")
            cases.append((verb, key, [codecs.decode(a, "unicode_escape") for a in args]))
    return cases


CASES = corpus()


def command(verb: str, args: list[str]) -> list[str]:
    return ["launch", "--dry-run", *args] if verb == "dry-run" else [verb, *args]


def test_corpus_is_large():
    assert len(CASES) >= 150


@pytest.mark.parametrize(
    ("verb", "key", "args"), CASES, ids=[f"{i}:{' '.join(c[2])[:50]}" for i, c in enumerate(CASES)]
)
def test_hostile_case_is_one_line_naming_its_key(tmp_path, verb, key, args):
    (tmp_path / "src").mkdir()
    outcome = invoke(command(verb, args), tmp_path)
    assert_clean(outcome, dry_run=verb == "dry-run")
    assert outcome.status == 2, outcome.stdout
    assert outcome.error_keys[0] == key, outcome.stderr
    assert_canary_nowhere(tmp_path)
