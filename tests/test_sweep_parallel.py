"""A large sweep prepares its points in forked worker processes: the points, their order, their errors, what
preparing them prints and the sweep's own errors are exactly the serial path's."""

import contextlib
import io
import os
from concurrent.futures.process import BrokenProcessPool

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from compiler.cli import main as cli
from compiler.cli import tasks
from compiler.config.compose import CONF_DIR, CONFIG_NAME
from compiler.sweep import launcher, parallel

POINTS = [
    ("parallelism=ddp", "trainer.seed=1"),
    ("parallelism=fsdp", "trainer.seed=2"),
    ("parallelism.tp=3",),  # invalid: the plan's rules
    ("model=nope",),  # invalid: Hydra's composition
    ("parallelism=zero1", "trainer.lr=0.002"),
    ("target=kubernetes", "hardware.nodes=2"),
    ("parallelism=ddp", "trainer.seed=3"),
]


@pytest.fixture
def in_parallel(monkeypatch):
    """Two workers for any batch of two points or more, whatever the machine's cores."""
    monkeypatch.setattr(parallel, "PER_WORKER", 1)
    monkeypatch.setattr(parallel, "cores", lambda: 2)


def prepared(sweep_dir) -> tuple[list[tuple], str, list[bool]]:
    """Every point of POINTS prepared by a fresh sweep, as comparable values, what the sweep printed, and
    which points came back from a worker with configs (left out, composed again when read)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        overrides = ["hydra/launcher=dockyard", f"hydra.sweep.dir={sweep_dir}"]
        master = loader.load_configuration(CONFIG_NAME, overrides, run_mode=RunMode.MULTIRUN)
        out = io.StringIO()
        sweep = launcher.Sweep(loader, master, launcher.Options(dry_run=True), out=out)
        points = sweep._prepare_all([(overrides, num) for num, overrides in enumerate(POINTS)])
    from_workers = [point.recompose is not None for point in points]
    comparable = []
    for point in points:
        cfg, hydra_cfg = point.configs()
        comparable.append((
            point.num,
            point.overrides,
            point.run_dir,
            point.run_id.rpartition("-")[2],  # the rest is the sweep's start time
            point.plan and point.plan.to_json(),
            point.request and point.request.to_json().replace(point.run_id, "RUN_ID"),
            point.error,
            point.job_name,
            cfg and OmegaConf.to_container(cfg),
            hydra_cfg and OmegaConf.to_container(hydra_cfg),
        ))  # fmt: skip
    return comparable, out.getvalue(), from_workers


def test_workers_prepare_the_points_the_serial_path_does(tmp_path, monkeypatch, in_parallel):
    monkeypatch.chdir(tmp_path)
    parallel_points, parallel_out, from_workers = prepared(tmp_path / "sweep")
    monkeypatch.setattr(parallel, "PER_WORKER", 10**9)
    serial_points, serial_out, from_none = prepared(tmp_path / "sweep")
    # the first warms the sweep's process; the workers composed all but the one Hydra could not ("model=nope")
    assert from_workers == [False, True, True, False, True, True, True]
    assert not any(from_none)
    assert parallel_points == serial_points
    assert parallel_out == serial_out
    assert [p[6] != "" for p in serial_points] == [False, False, True, True, False, False, False]
    assert "parallelism.tp" in serial_points[2][6] and "model" in serial_points[3][6]


def test_a_parallel_sweep_reports_its_invalid_points_as_the_serial_one(tmp_path, monkeypatch, in_parallel, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = ["-m", "hydra/launcher=dockyard", "hydra.launcher.dry_run=true", "parallelism.tp=1,3", "model=tiny,nope"]

    def errors(sweep_dir: str) -> str:
        with pytest.raises(SystemExit) as exit, contextlib.redirect_stdout(io.StringIO()):
            cli.run_app(tasks.dry_run_task, [*sweep, f"hydra.sweep.dir={sweep_dir}"])
        assert exit.value.code == 2
        return capsys.readouterr().err

    in_workers = errors("a")
    monkeypatch.setattr(parallel, "PER_WORKER", 10**9)
    assert in_workers == errors("b")
    assert in_workers.splitlines()[0].startswith("dockyard: error: sweep: 3 of 4 points are invalid")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_small_batch_or_one_core_stays_in_the_sweeps_process(monkeypatch):
    assert parallel.workers_for(parallel.PER_WORKER * 2 - 1) == 1
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    assert parallel.workers_for(10_000) == 1
    monkeypatch.setattr(parallel, "cores", lambda: 8)
    assert parallel.workers_for(parallel.PER_WORKER * 3) == 3


def test_a_points_return_composes_its_configs_again_when_read():
    cfg, hydra_cfg = OmegaConf.create({"trainer": {"seed": 1}}), OmegaConf.create({"hydra": {"job": {"num": 0}}})
    point = launcher.Point(0, ("trainer.seed=1",), cfg=cfg, hydra_cfg=hydra_cfg).without_configs()
    composed = []
    point.recompose = lambda: composed.append(1) or (cfg, hydra_cfg)
    returned = launcher.PointReturn(point, overrides=["trainer.seed=1"])
    assert point.cfg is None and composed == []  # nothing read yet
    assert returned.cfg == cfg and returned.hydra_cfg == hydra_cfg and composed == [1]
    returned.cfg = OmegaConf.create({"trainer": {"seed": 2}})
    assert returned.cfg.trainer.seed == 2 and returned.hydra_cfg == hydra_cfg and composed == [1]


def test_a_worker_that_dies_fails_the_sweep_instead_of_hanging_it():
    def prepare(overrides, num, out):
        if num == 5:
            os._exit(1)  # as the kernel's out-of-memory killer would end it
        print(f"point {num}", file=out)
        return num

    numbered = [((), num) for num in range(8)]
    out = io.StringIO()
    assert parallel.prepare_all(numbered[:4], prepare, lambda point: point, out, workers=2) == [0, 1, 2, 3]
    assert out.getvalue() == "point 0\npoint 1\npoint 2\npoint 3\n"
    with pytest.raises(BrokenProcessPool):
        parallel.prepare_all(numbered, prepare, lambda point: point, out, workers=2)
