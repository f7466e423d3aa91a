"""The training compiler as a measured A/B: `dockyard launch -m experiment=compiler-ab-cpu` trains eager and
compiled points on the local target (a real Docker engine; the compiled image carries g++ and Python.h), and the sweep
summary compares them on tokens/s, time to the same loss, compile time, peak memory and cost."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.launch import summary
from compiler.targets.records import RunRecord
from tests.entrypoint_support import INDUCTOR_ISA_FROM_CPUINFO
from tests.helpers import plan_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
COMPILE_TOLERANCE = 1e-4
"""The same micro batch, compiled or not, trains to the same loss (see test_entrypoint_compile)."""

CURVE = [
    {"step": 1, "loss": 7.6, "step_s": 12.5, "elapsed_s": 12.5, "memory_gib": 0.5},
    {"step": 2, "loss": 7.2, "step_s": 0.5, "elapsed_s": 13.0, "memory_gib": 0.7},
    {"step": 4, "loss": 6.9, "step_s": 0.4, "elapsed_s": 13.8, "memory_gib": 0.7},
    {"step": 6, "loss": 6.5, "step_s": 0.6, "elapsed_s": 15.0, "memory_gib": 0.6},
]


def test_compile_time_is_the_first_step_beyond_a_steady_one():
    assert summary.compile_seconds(CURVE) == 12.0  # 12.5 - median(0.5, 0.4, 0.6)
    assert summary.compile_seconds(CURVE[1:]) is None  # a resumed run has no first step
    assert summary.compile_seconds([{"step": 1, "loss": 7.6}]) is None


def test_time_to_loss_is_the_first_record_at_or_below_it():
    assert summary.time_to_loss(CURVE, 6.9) == 13.8
    assert summary.time_to_loss(CURVE, 6.0) is None
    assert summary.time_to_loss(CURVE, None) is None


def test_the_common_loss_is_the_worst_completed_final_loss():
    points = [
        RunRecord(run_dir="a", status="completed", final={"loss": 6.5}),
        RunRecord(run_dir="b", status="completed", final={"loss": 6.8}),
        RunRecord(run_dir="c", status="failed", final={"loss": 9.0}),
    ]
    assert summary.common_loss(points) == 6.8
    row = summary.row(points[0], curve=CURVE, target_loss=6.8)
    assert (row["time_to_loss_s"], row["compile_s"], row["memory_gib"]) == ("15.0", "12.0", "0.700")


def test_the_presets_scale_the_lr_with_the_batch_and_compile_the_larger_side():
    eager = plan_for("experiment=compiler-ab", "trainer.compile=false", "parallelism.micro_batch=12")
    compiled = plan_for("experiment=compiler-ab", "trainer.compile=blocks", "parallelism.micro_batch=24")
    assert (eager.batch.global_batch, compiled.batch.global_batch) == (480, 960)
    assert (eager.derived.lr, compiled.derived.lr) == (6e-4, 1.2e-3)
    assert (eager.model.name, eager.instance.has_gpus) == ("gpt2-124m", True)


def test_compile_true_is_the_blocks_it_meant_before_the_scopes():
    assert plan_for("experiment=smoke", "trainer.compile=true").trainer.compile == "blocks"
    assert plan_for("experiment=smoke", "trainer.compile=false").trainer.compile is False


@pytest.mark.torchrun
def test_compiler_ab_cpu_runs_locally_and_writes_the_comparison(tmp_path, engine):
    isa = [f"+target.environment.{name}={value}" for name, value in INDUCTOR_ISA_FROM_CPUINFO.items()]
    result = subprocess.run(
        [DOCKYARD, "launch", "-m", "experiment=compiler-ab-cpu", "hydra.sweep.dir=sweep", "trainer.steps=6",
         "parallelism.micro_batch=4",  # one micro batch of the experiment's two: the A/B is compile against eager
         "model.seq_len=64", *isa],  # a quarter of the experiment's tokens per step: the same kernels to compile
        cwd=tmp_path, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    (tmp_path / "output.log").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "sweep"
    with (folder / "summary.csv").open() as file:
        rows = {(r["overrides"].split()[0], r["overrides"].split()[1]): r for r in csv.DictReader(file)}
    assert set(rows) == {(f"trainer.compile={c}", "parallelism.micro_batch=4") for c in ("False", "blocks")}
    assert {r["status"] for r in rows.values()} == {"completed"}
    for row in rows.values():
        assert float(row["tokens_per_s"]) > 0 and float(row["memory_gib"]) > 0 and row["time_to_loss_s"]
    eager = rows["trainer.compile=False", "parallelism.micro_batch=4"]
    compiled = rows["trainer.compile=blocks", "parallelism.micro_batch=4"]
    assert float(compiled["final_loss"]) == pytest.approx(float(eager["final_loss"]), abs=COMPILE_TOLERANCE + 1e-4)
    assert float(compiled["compile_s"]) > float(eager["compile_s"]) + 1.0  # inductor's first step
    markdown = (folder / "summary.md").read_text()
    assert "time_to_loss_s: seconds of training to loss" in markdown
    header = (
        "| job | overrides | status | final_loss | val_loss | val_reward_accuracy | tokens_per_s | time_to_loss_s |"
    )
    assert header in markdown
    assert (folder / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
