"""The README's facts, checked so that documentation drift fails CI: every path it names exists, the counts
it gives are the files' own, and the commands it shows for planning, dry runs and `--explain` run and
print the lines it shows (a line of `...` stands for lines left out, `...` inside a line for any text).

Commands that build images or start jobs are left to the tests of those verbs; a command's placeholders
(`<account>`, `<role>`, `<bucket>`) are filled with example values, and no AWS credentials are given.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_hostile import CASES

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
PLACEHOLDERS = {"<account>": "123456789012", "<role>": "dockyard-training", "<bucket>": "my-bucket"}
REPO_PATH = re.compile(r"`((?:bench|compiler|conf|docs|entrypoint|hydra_plugins|images|scripts|tests)/[^`\s]*)`")


def test_every_path_the_readme_names_exists():
    named = {path.rstrip("/") for path in REPO_PATH.findall(README)}
    assert len(named) > 20
    missing = [path for path in sorted(named) if not _exists(path)]
    assert missing == []


def _exists(path: str) -> bool:
    """A path, or a pattern of them (`images/*.Dockerfile.j2`, `compiler/targets/<kind>/rules.py`)."""
    pattern = re.sub(r"<[^>]+>", "*", path)
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / path).exists()


def test_the_hostile_corpus_count_is_the_files():
    [count] = re.findall(r"`tests/data/hostile.txt` keeps ([\d,]+) such commands", README)
    assert int(count.replace(",", "")) == len(CASES)


def shown_commands() -> list[tuple[str, list[tuple[list[str], list[str]]]]]:
    """Each code block whose commands are all `plan`, `--dry-run` or `--explain`: its steps (a command and
    the lines shown after it, before the next command)."""
    blocks = []
    for number, block in enumerate(code_blocks()):
        steps: list[tuple[list[str], list[str]]] = []
        for line in block.replace("\\\n", " ").splitlines():
            text = line.removeprefix("$ ")
            if re.match(r"(\.venv/bin/)?dockyard(-entrypoint)? ", text):
                steps.append((shlex.split(text, comments=True), []))
            elif steps:
                steps[-1][1].append(line)
        commands = [argv for argv, _ in steps]
        if commands and all(_checkable(argv) for argv in commands):
            blocks.append((f"block{number}:{' '.join(commands[-1][1:4])}", steps))
    return blocks


def code_blocks() -> list[str]:
    """The text of each fenced code block, in order (a fence opens with ``` and any info string)."""
    blocks, inside = [], None
    for line in README.splitlines(keepends=True):
        if line.startswith("```"):
            blocks, inside = (blocks + [inside], None) if inside is not None else (blocks, "")
        elif inside is not None:
            inside += line
    return blocks


def _checkable(argv: list[str]) -> bool:
    verb = argv[1] if len(argv) > 1 else ""
    return verb == "plan" or "--dry-run" in argv or "--explain" in argv


BLOCKS = shown_commands()


def test_the_readme_shows_commands_to_check():
    names = " ".join(name for name, _ in BLOCKS)
    for shown in ("parallelism.tp=3", "parallelism.pp=4", "--explain", "target=sagemaker", "target=kubernetes"):
        assert shown in names


@pytest.mark.parametrize("steps", [steps for _, steps in BLOCKS], ids=[name for name, _ in BLOCKS])
def test_a_command_the_readme_shows_prints_what_it_shows(tmp_path, steps):
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "DOCKYARD_HOME": str(tmp_path / "home"),
    }
    for argv, shown in steps:
        argv = [str(BIN / Path(argv[0]).name), *(_filled(arg) for arg in argv[1:])]
        ran = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        printed = (ran.stdout + ran.stderr).splitlines()
        errors = [line for line in shown if line.startswith("dockyard: error:")]
        assert ran.returncode == (2 if errors else 0), ran.stderr
        for line in shown:
            if line.strip() != "...":
                pattern = ".*".join(re.escape(part) for part in line.strip().split("..."))
                assert any(re.fullmatch(pattern, out.strip()) for out in printed), (line, printed)


def _filled(arg: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        arg = arg.replace(placeholder, value)
    return arg
