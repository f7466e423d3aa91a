"""The run verbs (`runs`, `status`, `logs`, `stop`, `launch --resume`) against broken and hostile run folders:
every mistake is one line naming what to fix, never a traceback; a node's half-written last line is skipped
and counted."""

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.targets import records
from compiler.targets.base import COMPLETED, RUNNING
from compiler.targets.records import RunRecord
from tests.hostile import CANARY, invoke


def recorded(folder: Path, run_id: str = "a-run", **fields) -> Path:
    records.save(RunRecord(run_dir=str(folder), run_id=run_id, target="local", steps=20, status=COMPLETED, **fields))
    return folder


def one_line(outcome, key: str, status: int = 2) -> str:
    assert outcome.status == status, outcome.stdout + outcome.stderr
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.stderr.count("\n") == 1, outcome.stderr
    assert outcome.error_keys == [key], outcome.stderr
    return outcome.stderr


@pytest.mark.parametrize(
    ("args", "key", "words"),
    [
        (["runs", "--status", "bogus"], "--status", "invalid choice: 'bogus'"),
        (["runs", "--limit", "-1"], "--limit", "-1 is negative"),
        (["runs", "--limit", "x"], "--limit", "'x' is not a whole number"),
        (["runs", "--nope"], "overrides", "unrecognized arguments: --nope"),
        (["logs", "a-run", "--tail", "-5"], "--tail", "-5 is negative"),
        (["status"], "run", "is required"),
        (["status", "a-run", "-o", "yaml"], "--output", "invalid choice: 'yaml'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_option(tmp_path, args, key, words):
    recorded(tmp_path / "run")
    assert words in one_line(invoke(args, tmp_path), key)


BROKEN_RECORDS = {
    "unknown key": json.dumps({"run_dir": "x", "run_id": "a-run", "colour": "blue"}),
    "wrong type": json.dumps({"run_dir": "x", "run_id": "a-run", "attempts": "two"}),
    "a bool for a count": json.dumps({"run_dir": "x", "run_id": "a-run", "attempts": True}),
    "no run_dir": json.dumps({"run_id": "a-run"}),
    "a list": "[]",
    "half written": '{"run_dir": "x", "run_id": ',
    "not UTF-8": b'{"run_id": "\xff"}',
    "deep": "[" * 100_000 + "]" * 100_000,
    "NaN": '{"run_dir": "x", "price_per_hour": NaN}',
}


@pytest.mark.parametrize("verb", ["status", "stop", "logs"])
@pytest.mark.parametrize("content", BROKEN_RECORDS.values(), ids=BROKEN_RECORDS)
def test_a_broken_run_record_is_one_line_naming_the_file(tmp_path, verb, content):
    folder = recorded(tmp_path / "run")
    record = folder / records.RECORD_FILE
    record.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert str(record) in one_line(invoke([verb, str(folder)], tmp_path), "run")


def test_runs_leaves_out_a_broken_record_and_lists_the_others(tmp_path):
    recorded(tmp_path / "good", "good-run", started=1.0, ended=2.0)
    broken = recorded(tmp_path / "broken", "broken-run") / records.RECORD_FILE
    broken.write_text(json.dumps({"run_dir": str(broken.parent), "colour": f"\x1b[2J{CANARY}"}))
    outcome = invoke(["runs", "-o", "json"], tmp_path)
    assert outcome.status == 0, outcome.stderr
    assert [row["run_id"] for row in json.loads(outcome.stdout)] == ["good-run"]
    assert outcome.stderr == (
        f"dockyard: warning: left out run: {broken} has the unknown key 'colour'; "
        "give a run this dockyard version launched\n"
    )


@pytest.mark.parametrize("special", ["fifo", "folder", "dangling link"])
def test_a_run_record_that_is_no_regular_file_is_refused_without_blocking(tmp_path, special):
    import os

    folder = recorded(tmp_path / "run")
    record = folder / records.RECORD_FILE
    record.unlink()
    if special == "fifo":
        os.mkfifo(record)
    elif special == "folder":
        record.mkdir()
    else:
        record.symlink_to(tmp_path / "gone")
    outcome = invoke(["status", str(folder)], tmp_path)
    if special == "dangling link":  # not a run folder at all: the index has no such id either
        assert "no run" in one_line(outcome, "run")
    else:
        assert f"{record} is a " in one_line(outcome, "run")


def test_a_half_written_last_line_is_skipped_and_counted(tmp_path):
    folder = recorded(tmp_path / "run", started=1.0, ended=60.0)
    output = folder / "nodes/algo-1/output/data"
    output.mkdir(parents=True)
    lines = [{"step": 10, "loss": 3.0, "elapsed_s": 5.0}, {"step": 20, "loss": 2.5, "elapsed_s": 9.0}]
    (output / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 3')
    restart = {"restart": 1, "of": 2, "cause": "killed\x1b[31m", "resumed_step": 10, "steps_lost": 0}
    (output / "restarts.jsonl").write_text(json.dumps(restart) + '\n{"restart": 2, "of"')
    outcome = invoke(["status", str(folder), "-o", "json"], tmp_path)
    assert outcome.status == 0, outcome.stderr
    shown = json.loads(outcome.stdout)
    assert shown["step"] == 20 and shown["loss"] == 2.5
    assert shown["skipped_lines"] == {str(output / "metrics.jsonl"): 1, str(output / "restarts.jsonl"): 1}
    table = invoke(["status", str(folder)], tmp_path)
    assert table.status == 0, table.stderr
    assert f"skipped   1 unreadable line(s) of {output / 'metrics.jsonl'}" in table.stdout
    assert "restart   1 of 2: killed\\x1b[31m; resumed from step 10, 0 steps lost" in table.stdout
    assert "\x1b" not in table.stdout


def test_a_metrics_line_of_the_wrong_shape_is_skipped_not_charted(tmp_path):
    folder = recorded(tmp_path / "run")
    output = folder / "nodes/algo-1/output/data"
    output.mkdir(parents=True)
    rows = [{"step": 10, "loss": 3.0}, {"step": "20", "loss": 1.0}, {"step": 30, "loss": "low"}, [1], 7]
    (output / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    shown = json.loads(invoke(["status", str(folder), "-o", "json"], tmp_path).stdout)
    assert (shown["step"], shown["loss"]) == (10, 3.0)
    assert shown["skipped_lines"] == {str(output / "metrics.jsonl"): 4}


@pytest.mark.parametrize(
    ("missing", "content", "words"),
    [
        (".hydra/overrides.yaml", None, "overrides.yaml does not exist"),
        (".hydra/overrides.yaml", "{a: 1}", "overrides.yaml is not the list of overrides Hydra writes"),
        (".hydra/overrides.yaml", "[a, [b]]", "overrides.yaml is not the list of overrides Hydra writes"),
        ("plan.json", None, "plan.json does not exist"),
        ("plan.json", "{", "plan.json is not a plan"),
    ],
)
def test_resuming_a_run_with_a_missing_or_broken_file_is_one_line(tmp_path, missing, content, words):
    assert invoke(["plan", "experiment=smoke", "hydra.run.dir=run"], tmp_path).status == 0
    folder = recorded(tmp_path / "run")
    (folder / "checkpoints/step-00000010").mkdir(parents=True)
    (folder / "checkpoints/step-00000010/dockyard.json").write_text("{}")
    (folder / missing).unlink()
    if content is not None:
        (folder / missing).write_text(content)
    assert words in one_line(invoke(["launch", "--resume", str(folder)], tmp_path), "--resume")


def test_status_and_stop_of_a_sagemaker_run_without_an_endpoint_are_one_line(tmp_path, monkeypatch):
    """No endpoint answers (a closed port): botocore's connection error is one PlatformError line."""
    for name, value in {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_RETRY_MODE": "standard",
    }.items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "run"
    handle = {"job_name": "a-job", "region": "us-east-1"}
    records.save(RunRecord(run_dir=str(folder), run_id="sm-run", target="sagemaker", status=RUNNING, handle=handle))
    for verb in ("status", "stop", "logs"):
        text = one_line(invoke([verb, "sm-run"], tmp_path), "SageMaker cannot be asked about job a-job", status=1)
        assert "Could not connect to the endpoint URL" in text, text


def test_a_records_values_reach_the_terminal_in_one_printable_form(tmp_path):
    """A run id, an image and a platform's detail with escapes and newlines cannot forge or erase a line."""
    forged = "x\x1b[2J\ndockyard: error: forged\x07\x00"
    folder = recorded(tmp_path / "run", image=forged, detail=forged)
    record = json.loads((folder / records.RECORD_FILE).read_text())
    (folder / records.RECORD_FILE).write_text(json.dumps(record | {"run_id": f"forged{forged}"}))
    for args in (["status", str(folder)], ["runs"], ["stop", str(folder)]):
        outcome = invoke(args, tmp_path)
        assert outcome.status == 0, outcome.stderr
        assert not {"\x1b", "\x07", "\x00"} & set(outcome.stdout), outcome.stdout
        assert "\ndockyard: error: forged" not in outcome.stdout
        assert "x\\x1b[2J\\ndockyard: error: forged" in outcome.stdout


RUN_VERB_WORDS = st.sampled_from(
    ["--status", "--limit", "--tail", "--node", "--target", "-o", "-f", "--plot", "--sort", "-1", "0", "7", "json",
     "table", "bogus", "a-run", "completed", "local", "\uff12", "\x1b[2J", "a\nb", "", "-", "--", "x" * 300]
)  # fmt: skip


@settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(verb=st.sampled_from(["runs", "status", "logs", "stop"]), args=st.lists(RUN_VERB_WORDS, max_size=4))
def test_any_run_verb_command_line_ends_in_output_or_one_line(tmp_path_factory, verb, args):
    cwd = tmp_path_factory.mktemp("verbs")
    recorded(cwd / "run", started=1.0, ended=2.0)
    outcome = invoke([verb, *args], cwd)
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text and "\x1b" not in text, text
    assert outcome.status in (0, 2), text
    if outcome.status == 2:
        assert outcome.stderr.count("\n") == 1 and len(outcome.error_keys) == 1, outcome.stderr
