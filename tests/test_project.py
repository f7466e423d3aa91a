"""A user's project (`dockyard init`): its config folder searched before dockyard's, its code read from the
project whatever the current folder, nothing of it overwritten."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCKYARD = str(Path(sys.executable).with_name("dockyard"))
IMAGE_TAG = re.compile(r"dockyard/mine:[0-9a-f]{20}")


def dockyard(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, **env}
    return subprocess.run([DOCKYARD, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    result = dockyard("init", "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "next      cd demo && dockyard launch experiment=mine" in result.stdout
    return tmp_path / "demo"


def test_init_writes_a_project_whose_experiment_plans_from_its_folder(project: Path) -> None:
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()) == [
        ".dockerignore",
        "README.md",
        "conf/experiment/mine.yaml",
        "train.py",
    ]
    result = dockyard("plan", "experiment=mine", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "script    train.py from .   hyperparameters steps=20 lr=0.05" in result.stdout
    listed = dockyard("plan", "--help", cwd=project).stdout
    assert re.search(r"^  experiment: .*\bmine\b.*\bsmoke\b", listed, re.MULTILINE)


def test_init_overwrites_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("mine\n")
    result = dockyard("init", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "dockyard: error: init: train.py exists already; run it in a new or empty folder\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]
    assert (tmp_path / "train.py").read_text() == "mine\n"


def test_init_where_it_cannot_write_is_one_line_and_a_link_is_never_written_through(tmp_path: Path) -> None:
    result = dockyard("init", "/etc/passwd/demo", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "dockyard: error: init: cannot write '/etc/passwd/demo/conf/experiment': Not a directory; "
        "name a folder you can write\n"
    )
    (tmp_path / "train.py").symlink_to(tmp_path / "elsewhere.py")  # dangling: writing it would make elsewhere.py
    result = dockyard("init", cwd=tmp_path)
    assert result.stderr == "dockyard: error: init: train.py exists already; run it in a new or empty folder\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


def test_the_projects_code_is_read_from_the_project_whatever_the_current_folder(project: Path, tmp_path: Path) -> None:
    """From another folder, `$DOCKYARD_CONFIG_DIR` or `--config-dir` finds the experiment, and its relative
    `trainer.source_dir` is the project's: the same image as from the project itself."""
    dry_run = ("launch", "experiment=mine", "target=kubernetes", "--dry-run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    images = set()
    for cwd, flags, env in (
        (project, (), {}),
        (elsewhere, (), {"DOCKYARD_CONFIG_DIR": str(project / "conf")}),
        (elsewhere, ("--config-dir", str(project / "conf")), {}),
    ):
        result = dockyard(*dry_run[:1], *flags, *dry_run[1:], cwd=cwd, **env)
        assert result.returncode == 0, result.stderr
        images.update(IMAGE_TAG.findall(result.stdout))
    assert len(images) == 1


def test_a_config_dir_variable_naming_no_folder_is_one_line(tmp_path: Path) -> None:
    result = dockyard("plan", cwd=tmp_path, DOCKYARD_CONFIG_DIR=str(tmp_path / "none"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"dockyard: error: DOCKYARD_CONFIG_DIR: '{tmp_path / 'none'}' is not a folder")
    assert list(tmp_path.iterdir()) == []


def test_an_edit_to_the_projects_config_is_composed_again(project: Path) -> None:
    """The compose cache hashes the bytes of every folder of the search path, the user's included."""
    assert "steps=20" in dockyard("plan", "experiment=mine", cwd=project).stdout
    experiment = project / "conf" / "experiment" / "mine.yaml"
    experiment.write_text(experiment.read_text().replace("steps: 20", "steps: 7"))
    assert "steps=7" in dockyard("plan", "experiment=mine", cwd=project).stdout


def test_a_folder_a_config_file_names_that_cannot_be_made_is_one_line_naming_its_key(project: Path) -> None:
    """`hydra: run: dir:` or `sweep: dir:` in the user's experiment, not on the command line, through a file or
    into /proc: the key's one line, from the project and from elsewhere through `--config-dir`; nothing made."""
    experiment = project / "conf" / "experiment" / "mine.yaml"
    written = experiment.read_text()
    experiment.write_text(written + "hydra:\n  run:\n    dir: /etc/passwd/${name}\n")
    for cwd, flags in ((project, ()), (project.parent, ("--config-dir", str(project / "conf")))):
        result = dockyard("plan", *flags, "experiment=mine", cwd=cwd)
        assert (result.returncode, result.stderr) == (
            2,
            "dockyard: error: hydra.run.dir: cannot create '/etc/passwd/mine': Not a directory; "
            "name a folder you can write\n",
        )
    experiment.write_text(written + "hydra:\n  sweep:\n    dir: /proc/sweeps\n")
    sweep = ("-m", "experiment=mine", "trainer.hyperparameters.steps=1,2")
    for command in (("plan", *sweep), ("launch", *sweep, "--dry-run")):
        result = dockyard(*command, cwd=project)
        assert (result.returncode, result.stderr) == (
            2,
            "dockyard: error: hydra.sweep.dir: cannot create '/proc/sweeps': No such file or directory; "
            "name a folder you can write\n",
        )
    assert sorted(p.name for p in project.iterdir()) == [".dockerignore", "README.md", "conf", "train.py"]
