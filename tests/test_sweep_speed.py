"""What keeps a large sweep's preparation fast without changing its result: the workers leave the heap they
inherit out of garbage collection, and an interpolation's text is parsed once per process."""

import contextlib
import gc
import io

import pytest
from omegaconf import OmegaConf, base
from omegaconf.errors import GrammarParseError

from compiler.cli import main as cli
from compiler.cli import tasks
from compiler.config import compose  # noqa: F401  (installs the parse cache, as every dockyard command does)
from compiler.sweep import parallel
from compiler.targets import records


def test_workers_run_with_the_inherited_heap_frozen_and_the_sweep_unfreezes_it():
    def prepare(overrides, num, out):
        return gc.get_freeze_count()

    frozen_before = gc.get_freeze_count()
    counts = parallel.prepare_all([((), num) for num in range(4)], prepare, lambda point: point, io.StringIO(), 2)
    assert all(count > frozen_before for count in counts)  # the sweep's objects, frozen before the fork
    assert gc.get_freeze_count() == frozen_before


def test_an_interpolation_parsed_once_resolves_in_every_config_that_holds_it():
    text = "${trainer.seed}-${oc.select:trainer.name,none}"
    parses = base.parse.cache_info().misses
    first = OmegaConf.create({"trainer": {"seed": 1}, "label": text})
    second = OmegaConf.create({"trainer": {"seed": 2, "name": "b"}, "label": text})
    other = OmegaConf.create({"x": 5, "y": "${x}"})  # another text parsed in between (the parser is reused)
    assert (first.label, second.label, other.y, first.label) == ("1-none", "2-b", 5, "1-none")
    assert base.parse.cache_info().misses == parses + 2
    for _ in range(2):  # a text that does not parse fails every time
        with pytest.raises(GrammarParseError):
            base.parse("${trainer.seed")


def test_a_parallel_dry_run_writes_the_files_and_prints_the_lines_of_the_serial_one(tmp_path, monkeypatch):
    """A dry run's request text and record are made in the workers; the sweep's process writes them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    sweep = ["-m", "hydra/launcher=dockyard", "hydra.launcher.dry_run=true", "parallelism=ddp,fsdp", "trainer.seed=1,2"]

    def dry_run(folder: str) -> tuple[dict[str, str], str]:
        """The files the dry run wrote and what it printed, its folder and the sweep's start time named alike."""
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            cli.run_app(tasks.dry_run_task, [*sweep, f"hydra.sweep.dir={folder}"])
        started = {record.run_id.rpartition("-")[0] for record in records.load_all(tmp_path / folder)}
        assert len(started) == 1  # the rest of each point's run id is its number

        def alike(text: str) -> str:
            return text.replace(str(tmp_path / folder), "SWEEP_DIR").replace(next(iter(started)), "RUN")

        files = {str(path.relative_to(tmp_path / folder)): alike(path.read_text())
                 for path in sorted((tmp_path / folder).glob("*/*.json"))}  # fmt: skip
        return files, alike(printed.getvalue())

    monkeypatch.setattr(parallel, "PER_WORKER", 1)
    in_workers = dry_run("in-workers")
    monkeypatch.setattr(parallel, "PER_WORKER", 10**9)
    assert in_workers == dry_run("in-process")
    assert sorted(in_workers[0]) == [f"{n}/{name}" for n in range(4) for name in ("request.json", "run.json")]
