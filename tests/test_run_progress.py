"""Where a run stands (`compiler.launch.progress`) and how the run verbs write it (`compiler.cli.show`):
the arithmetic, without a job."""

from compiler.cli import show
from compiler.launch.progress import progress
from compiler.targets.records import RunRecord

ROWS = [
    {"step": 10, "loss": 4.0, "tokens_per_s": 900.0, "elapsed_s": 20.0},
    {"step": 10, "val_loss": 4.5},
    {"step": 20, "loss": 3.0, "tokens_per_s": 1000.0, "elapsed_s": 40.0},
]


def record(**fields) -> RunRecord:
    return RunRecord(**{"run_dir": "/runs/r", "run_id": "r", "target": "sagemaker", "steps": 60, **fields})


def test_a_running_run_has_an_eta_at_the_pace_of_its_steps_and_a_cost_so_far():
    now = progress(record(status="running", started=1000.0, price_per_hour=36.0, predicted_s=200.0), ROWS, 1100.0)
    assert (now.step, now.steps, now.loss, now.val_loss, now.tokens_per_s) == (20, 60, 3.0, 4.5, 1000.0)
    assert now.elapsed_s == 100.0
    assert now.eta_s == 80.0  # 40 steps left at 2 s a step
    assert now.cost_usd == 1.0  # 100 s at $36/h
    assert now.predicted_cost_usd == 2.0


def test_an_ended_run_counts_to_its_end_and_billed_seconds_win():
    ended = record(status="completed", started=1000.0, ended=1500.0, billable_s=360.0, price_per_hour=36.0)
    now = progress(ended, [], 9999.0)
    assert (now.elapsed_s, now.eta_s, now.cost_usd, now.step) == (500.0, None, 3.6, None)


def test_the_platforms_final_metrics_stand_in_where_no_metrics_file_is_here():
    now = progress(record(status="completed", final={"loss": 2.5, "step": 60}), [], 0.0)
    assert (now.step, now.loss, now.started, now.elapsed_s) == (60, 2.5, None, None)


def test_a_run_without_a_price_has_no_cost():
    now = progress(record(status="running", started=0.0), ROWS, 10.0)
    assert (now.cost_usd, now.predicted_cost_usd) == (None, None)


def test_durations_read_short():
    assert [show.duration(s) for s in (None, 0.4, 42, 185, 7440, 3 * 86400 + 7200)] == [
        "-",
        "0 s",
        "42 s",
        "3 min 05 s",
        "2 h 04 min",
        "3 d 2 h",
    ]


def test_status_lines_say_step_loss_time_and_cost():
    now = progress(record(status="running", started=1000.0, price_per_hour=36.0, predicted_s=200.0), ROWS, 1100.0)
    assert show.status_lines(now) == [
        ("progress", "step 20/60, loss 3, val_loss 4.5, 1,000 tokens/s"),
        ("time", "ran 1 min 40 s, eta 1 min 20 s"),
        ("cost", "$1.00 so far, $2.00 predicted in all"),
    ]


def test_the_runs_table_aligns_its_columns():
    rows = [
        progress(record(run_id="a-long-run-id", status="running", started=1000.0), ROWS, 1100.0),
        progress(record(run_id="b", target="local", status="pending"), [], 1100.0),
    ]
    assert show.runs_table(rows, 1100.0).splitlines() == [
        "RUN            TARGET     STATUS   AGE         DURATION    STEP   LOSS  COST",
        "a-long-run-id  sagemaker  running  1 min 40 s  1 min 40 s  20/60  3     -",
        "b              local      pending  -           -           0/60   -     -",
    ]
