"""What a run costs as a whole: the plan's predicted wall time and cost (steps × step time × the price of all
its nodes) in the summary and report.md, the sweep summary's total, and every run's loss.png."""

import json

import pytest

from compiler.launch import runs, summary
from compiler.planner.summary import report_markdown, summary_lines
from compiler.targets.records import RunRecord
from tests.helpers import plan_for

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_plan_says_what_the_whole_run_takes_and_costs():
    plan = plan_for("experiment=llama3-8b-p5x4", "trainer.steps=20000")
    seconds = 20000 * plan.estimate.throughput.step_seconds
    cost = seconds / 3600 * plan.price_per_hour
    assert plan.price_per_hour == pytest.approx(4 * plan.instance.price_per_hour)  # every node is paid for
    expected = (
        f"20,000 steps × {seconds / 20000:.2f} s = {seconds / 3600:,.1f} h predicted, "
        f"${cost:,.2f} at ${plan.price_per_hour:,.2f}/h"
    )
    assert f"total     {expected}" in summary_lines(plan)
    assert f"- the whole run: {expected}" in report_markdown(plan)


def point(num: int, **times: float) -> RunRecord:
    return RunRecord(run_dir=f"/sweep/{num}", run_id=f"p{num}", target="local", num=num, price_per_hour=3.6, **times)


def test_the_sweep_summary_adds_up_its_points():
    points = [point(0, started=100.0, ended=200.0), point(1, predicted_s=50.0)]
    assert summary.total_line(points) == "\nTotal: $0.15 for 2 points, 100.0 s of wall time over 1 points.\n"
    assert summary.total_line([]) == ""


def test_a_run_is_plotted_with_its_validation_loss(tmp_path):
    folder = tmp_path / "nodes/algo-1/output/data"
    folder.mkdir(parents=True)
    records = [{"step": s, "loss": 5.0 / s, "elapsed_s": s * 0.5} for s in (1, 2, 3, 4)]
    records[1]["val_loss"], records[3]["val_loss"] = 2.9, 1.6
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert runs.plot_run(tmp_path, "run-1") == tmp_path / "loss.png"
    assert (tmp_path / "loss.png").read_bytes()[:8] == PNG
    assert runs.plot_run(tmp_path / "nodes/algo-2", "run-2") is None  # no metrics, no picture
