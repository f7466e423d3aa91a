"""Where a run stands (`compiler.launch.progress`), how the run verbs write it (`compiler.cli.show`) and
how a job's log lines are merged (`compiler.targets.logs`): the arithmetic, without a job."""

import io

from compiler.cli import show
from compiler.core.terminal import plain, wants_colour
from compiler.images.build import stream_build_log
from compiler.launch.progress import ProgressWriter, duration, for_people, progress
from compiler.targets.logs import LogLine, merged, split_timestamp, stamped
from compiler.targets.records import RunRecord
from compiler.targets.sagemaker.submit import stream_host

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
    assert [duration(s) for s in (None, 0.4, 42, 185, 7440, 3 * 86400 + 7200)] == [
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
    assert show.runs_table(rows, 1100.0, io.StringIO()).splitlines() == [
        "RUN            TARGET     STATUS   AGE         DURATION    STEP   LOSS  COST",
        "a-long-run-id  sagemaker  running  1 min 40 s  1 min 40 s  20/60  3     -",
        "b              local      pending  -           -           0/60   -     -",
    ]


def test_log_lines_interleave_by_time_and_keep_each_nodes_order():
    first = [LogLine("algo-1", "a", 1.0), LogLine("algo-1", "c", 3.0)]
    second = [LogLine("algo-2", "b", 2.0), LogLine("algo-2", "b too", 2.0)]
    assert [line.text for line in merged([first, second])] == ["a", "b", "b too", "c"]
    assert str(LogLine("", "the job's own line")) == "the job's own line"


def test_timestamps_are_read_as_docker_and_the_kubelet_write_them():
    line = stamped("step 1", 1795647630.25)
    assert line == "2026-11-25T23:00:30.250000Z step 1"
    assert split_timestamp(line) == (1795647630.25, "step 1")
    assert split_timestamp("2026-11-25T23:00:30.250000123Z x") == (1795647630.25, "x")
    assert split_timestamp("2026 was a year") == (None, "2026 was a year")


def test_a_sagemaker_stream_names_its_instances_host():
    assert stream_host("job/algo-2-1700000000") == "algo-2"
    assert stream_host("job/algo-1") == "algo-1"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color():
    assert wants_colour(Terminal(), {}) and not wants_colour(io.StringIO(), {})
    assert not wants_colour(Terminal(), {"NO_COLOR": "1"})
    rows = [progress(record(status="completed"), [], 0.0)]
    assert "\x1b[32mcompleted" in show.runs_table(rows, 0.0, Terminal())
    assert "\x1b" not in show.runs_table(rows, 0.0, io.StringIO())


def test_a_terminal_sees_metrics_lines_as_progress_lines():
    screen = Terminal()
    out = for_people(screen, 60)
    out.write('algo-1 | {"step": 20, "loss": 1.8312, "tokens_per_s": 1234.5, "elapsed_s": 7.0}\nalgo-1 | not ')
    out.write('metrics\n{"step": 60, "loss": 1.5}\n')
    assert screen.getvalue() == (
        "algo-1 | step 20/60  loss 1.831  1,234 tokens/s  eta 14 s\nalgo-1 | not metrics\nstep 60/60  loss 1.5\n"
    )
    assert isinstance(out, ProgressWriter)
    piped = io.StringIO()
    assert for_people(piped, 60) is piped  # a file or a pipe keeps the JSON lines


def test_build_output_off_a_terminal_has_no_escape_codes_or_redrawn_bars():
    chunks = [{"stream": "Step 1/2 : FROM base\n"}, {"stream": "\x1b[1mgetting\x1b[0m 10%\r50%\r100%\n"}]
    piped = io.StringIO()
    stream_build_log(iter(chunks), piped)
    assert piped.getvalue().splitlines()[1:] == ["100%"]
    screen = Terminal()
    stream_build_log(iter(chunks), screen)
    assert "\x1b[1mgetting\x1b[0m 10%\r50%\r100%\n" in screen.getvalue()
    assert (plain("a\r\n"), plain("\x1b[31mred\x1b[0m 1%\r2%\n"), plain("bar\r")) == ("a\n", "2%\n", "")
