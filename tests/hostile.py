"""`dockyard` run in-process as a hostile user would run it, and what every such run must respect.

`invoke` runs the real CLI entry point (`compiler.cli.main.main`) in a working directory of its own, with
a canary secret in the environment, and returns the exit status, the output, and the files the run
created or removed. `assert_clean` is the contract every input is held to: exit 0 with a plan in one
fresh folder (or nothing, for a dry run), or exit 2 with at most two lines that name a real config key;
never a traceback, never the canary.
"""

import contextlib
import dataclasses
import io
import os
import re
import typing
from dataclasses import dataclass
from pathlib import Path

from compiler.cli.main import main
from compiler.spec import schema

CANARY_VARIABLE = "DOCKYARD_CANARY_SECRET"
CANARY = "canary-4f1d9a7c2e-secret"
ERROR_LINE = re.compile(r"dockyard: error: (?:\[job \d+: [^\]]*\] )?(?P<key>[^:]+?): .+")
NOT_SCHEMA_KEYS = {"overrides", "verb", "config", "run", "hydra.run.dir", "hydra.sweep.dir", "hydra.output_subdir"}
"""Keys an error may name that are not the schema's: the command line, the primary config file, the run a
`status`, `logs` or `stop` names, and Hydra's run and sweep folders."""


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str
    created: set[Path]
    removed: set[Path]

    @property
    def error_keys(self) -> list[str]:
        return [m["key"] for line in self.stderr.splitlines() if (m := ERROR_LINE.fullmatch(line))]


def files_under(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}


def invoke(args: list[str], cwd: Path) -> Outcome:
    """Run `dockyard ARGS` in-process in `cwd` with the canary secret in the environment."""
    before = files_under(cwd)
    out, err = io.StringIO(), io.StringIO()
    status = 0
    old_cwd = Path.cwd()
    os.environ[CANARY_VARIABLE] = CANARY
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException as exc:  # a crash is an outcome the assertions report, with its type
                status, err = 1, io.StringIO(f"Traceback (crash): {type(exc).__name__}: {exc}\n")
    finally:
        os.chdir(old_cwd)
        del os.environ[CANARY_VARIABLE]
    after = files_under(cwd)
    return Outcome(status, out.getvalue(), err.getvalue(), after - before, before - after)


def is_config_key(key: str) -> bool:
    """A dotted key that the schema has (a group, a field, or an entry of a map field)."""
    if key in NOT_SCHEMA_KEYS or key.startswith("-"):  # a flag of the command line: --resume, --limit
        return True
    types: list[object] = [schema.Config]
    for name in key.split("."):
        following: list[object] = []
        for cls in types:
            if typing.get_origin(cls) is dict:
                following.append(typing.get_args(cls)[1])
            elif dataclasses.is_dataclass(cls):
                hints = typing.get_type_hints(cls)
                if name == "target" and cls is schema.Config:
                    following += _subclasses(schema.TargetConfig)
                elif name in hints:
                    following.append(hints[name])
        if not following:  # an unknown key is reported where it was given, below a real one
            return "." in key and is_config_key(key.rpartition(".")[0])
        types = following
    return True


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def assert_clean(outcome: Outcome, *, dry_run: bool = False) -> None:
    """The contract for any input (see the module's docstring)."""
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    assert CANARY not in text, text
    assert not outcome.removed, f"removed files it did not create: {sorted(outcome.removed)}"
    if outcome.status == 0:
        if dry_run:
            assert not outcome.created, sorted(outcome.created)
            return
        plans = [p for p in outcome.created if p.name == "plan.json"]
        assert len(plans) == 1, sorted(outcome.created)
        folder = plans[0].parent
        assert all(p == folder or folder in p.parents or p in folder.parents for p in outcome.created)
        return
    assert outcome.status == 2, text
    lines = outcome.stderr.splitlines()
    assert 1 <= len(lines) <= 2, outcome.stderr
    assert outcome.error_keys and len(outcome.error_keys) == len(lines), outcome.stderr
    assert all(is_config_key(key) for key in outcome.error_keys), outcome.stderr
    assert not outcome.created, f"an error left files: {sorted(outcome.created)}"


def assert_canary_nowhere(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
