"""A single run (`compiler.cli.single_run`) composes once and leaves what Hydra's own runner leaves."""

import re
from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl

from compiler.cli import main as cli
from compiler.cli import single_run

OVERRIDES = [
    "experiment=smoke",
    "trainer.seed=7",
    "name=same",
    "hydra.run.dir=out",
    "target.environment={NOTE: \"ünïcode 'quoted' text: a line long enough for an emitter to fold it somewhere\"}",
    "image.torch='2.10'",
]
STAGING = re.compile(r"\.dockyard-[0-9a-f]{32}")


def hydra_files(folder: Path) -> dict[str, str]:
    """The `.hydra` files of a run folder, with what differs between two invocations named alike (the staging
    folder's name, the working folder)."""
    return {
        path.name: STAGING.sub("STAGING", path.read_text()).replace(str(folder.parent), "CWD")
        for path in sorted((folder / ".hydra").iterdir())
    }


def test_a_single_run_leaves_the_files_hydras_runner_leaves(tmp_path, monkeypatch):
    runs = []
    run = single_run.run
    monkeypatch.setattr(single_run, "run", lambda *args: runs.append(args) or run(*args))
    for name in ("ours", "hydras"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        if name == "hydras":
            monkeypatch.setattr(single_run, "is_single_run", lambda flags: False)
        cli.main(["plan", *OVERRIDES])
    assert len(runs) == 1  # the first command only
    ours, hydras = hydra_files(tmp_path / "ours" / "out"), hydra_files(tmp_path / "hydras" / "out")
    assert list(ours) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert ours == hydras
    assert "- trainer.seed=7" in ours["overrides.yaml"] and "- hydra.mode=RUN" in ours["hydra.yaml"]
    plans = [(tmp_path / name / "out" / "plan.json").read_text() for name in ("ours", "hydras")]
    assert plans[0] == plans[1]


def test_a_plan_composes_once(tmp_path, monkeypatch):
    """`hydra.main` composes a command twice (the second from the cache); a single run composes it once."""
    calls = []
    load = ConfigLoaderImpl.load_configuration
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", lambda *a, **k: calls.append(a) or load(*a, **k))
    monkeypatch.chdir(tmp_path)
    cli.main(["plan", "experiment=smoke"])
    assert len(calls) == 1
    assert next(tmp_path.glob("outputs/smoke/*/plan.json")).is_file()


def test_sweep_overrides_take_hydras_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli.main(["plan", "hydra.mode=MULTIRUN", "trainer.seed=1,2", "hydra.sweep.dir=sweep"])
    assert sorted(path.parent.name for path in tmp_path.glob("sweep/*/plan.json")) == ["0", "1"]


def test_a_config_folder_that_is_not_there_is_refused_as_hydra_refuses_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        cli.main(["plan", f"--config-dir={tmp_path / 'nowhere'}", "experiment=smoke"])
    assert exit.value.code == 2
    assert f"Additional config directory '{tmp_path / 'nowhere'}' not found" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
