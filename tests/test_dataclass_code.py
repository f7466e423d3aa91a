"""The dataclass methods kept compiled between commands (`compiler.core.dataclass_code`): a class made from the
cache has the methods compiling makes; a second `dockyard plan` compiles none; the file keeps other commands'
methods up to a bound; a damaged or unwritable file costs only time."""

import dataclasses
import json
import subprocess
import sys

import pytest

from compiler.core import dataclass_code

CLASSES = """
from dataclasses import dataclass, field

@dataclass(frozen=True, kw_only=True)
class Frozen:
    name: str
    sizes: tuple[int, ...] = ()
    scale: float = 1.0

@dataclass
class Plain:
    count: int = 0
    labels: list[str] = field(default_factory=list)
"""
OTHER = "from dataclasses import dataclass\n@dataclass\nclass Other:\n    size: int = 1\n"
THIRD = "from dataclasses import dataclass\n@dataclass\nclass Third:\n    width: float = 2.0\n"


def made(methods: dataclass_code.CompiledMethods | None, classes: str = CLASSES) -> dict:
    """The classes of `classes`, made through `methods` (None: as Python makes them)."""
    namespace: dict = {"__name__": "made"}
    with pytest.MonkeyPatch.context() as patch:
        if methods is not None:
            patch.setattr(dataclasses, "exec", methods.exec, raising=False)
        exec(classes, namespace)
    return namespace


def kept(path) -> set[str]:
    return set(dataclass_code.CompiledMethods(path).known)


def methods_of(cls: type) -> dict:
    return {name: value.__code__ for name, value in vars(cls).items() if hasattr(value, "__code__")}


def test_a_class_made_from_the_cache_has_the_methods_compiling_makes(tmp_path):
    path = tmp_path / "code.marshal"
    first = dataclass_code.CompiledMethods(path)
    made(first)
    first.save()
    second = dataclass_code.CompiledMethods(path)
    cached, compiled = made(second), made(None)
    assert second.compiled == 0 and len(second.used) == first.compiled > 0
    for name in ("Frozen", "Plain"):
        assert methods_of(cached[name]) == methods_of(compiled[name])
    frozen, same = cached["Frozen"](name="a", sizes=(1,)), cached["Frozen"](name="a", sizes=(1,))
    assert repr(frozen) == "Frozen(name='a', sizes=(1,), scale=1.0)" and frozen == same and hash(frozen) == hash(same)
    assert cached["Plain"]() != cached["Plain"](1)
    assert cached["Plain"]().labels is not cached["Plain"]().labels
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.name = "b"


PLAN = """
import contextlib, io, sys
from compiler.core import dataclass_code
installed = []
install = dataclass_code.install
dataclass_code.install = lambda: installed.append(install()) or installed[-1]
sys.argv = ["dockyard", "plan", "experiment=smoke"]
from compiler.cli import start
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    start.main()
print([installed[0].compiled, len(installed[0].used)])
"""


def test_a_second_plan_compiles_no_dataclass_method(tmp_path):
    """The first command compiles the methods of every dataclass it makes (Hydra's, its plug-ins', dockyard's)
    and keeps them; the second takes them all from the cache."""
    counts = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", PLAN], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        counts.append(json.loads(result.stdout.splitlines()[-1]))
    [compiled, used], [compiled_again, used_again] = counts
    assert compiled == used > 100 and compiled_again == 0 and used_again == used


def test_the_file_keeps_what_other_commands_compiled_up_to_its_bound(tmp_path, monkeypatch):
    """Each verb makes classes of its own: a command keeps the others' methods, until the file holds more than
    MAX_METHODS (then mostly of classes since changed) and the next writer starts again from what it used."""
    path = tmp_path / "code.marshal"
    commands = []
    for classes in (CLASSES, OTHER, THIRD):
        commands.append(dataclass_code.CompiledMethods(path))
        made(commands[-1], classes)
        commands[-1].save()
        if classes is OTHER:
            assert commands[1].compiled == 3  # Other's __init__, __repr__ and __eq__
            assert kept(path) == commands[0].used | commands[1].used
            monkeypatch.setattr(dataclass_code, "MAX_METHODS", len(kept(path)))
    assert kept(path) == commands[2].used


def test_a_damaged_file_is_compiled_again(tmp_path):
    path = tmp_path / "code.marshal"
    methods = dataclass_code.CompiledMethods(path)
    made(methods)
    methods.save()
    content = path.read_bytes()
    for damaged in (content[:-1], content[:8], b"", content[:20] + bytes([content[20] ^ 1]) + content[21:]):
        path.write_bytes(damaged)
        again = dataclass_code.CompiledMethods(path)
        assert again.known == {}
        made(again)
        again.save()
        assert kept(path) == methods.used


def test_an_unwritable_cache_costs_only_time(tmp_path):
    (tmp_path / "file").write_text("")  # where the cache's folder would be
    methods = dataclass_code.CompiledMethods(tmp_path / "file" / "code.marshal")
    made(methods)
    methods.save()
    assert methods.compiled > 0 and (tmp_path / "file").read_text() == ""


def test_without_a_home_folder_every_method_is_compiled(monkeypatch):
    """`Path.home()` fails for a user without $HOME whom the password database lacks: the command still runs."""

    def no_home(name):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(dataclass_code, "cache", no_home)
    monkeypatch.setattr(dataclasses, "exec", exec, raising=False)  # what install() replaces, put back after
    methods = dataclass_code.install()
    made(methods)
    methods.save()
    assert methods.path is None and methods.compiled > 0
