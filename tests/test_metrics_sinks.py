"""The metrics seam: the planner's list of sink names is the trainer's registry, and a line the `jsonl` sink
writes is what SageMaker's metric regexes and the run reader both read (Python's `re` stands in for
SageMaker's regex engine: these patterns use nothing the two treat differently)."""

import io
import re

from compiler.launch import runs
from compiler.spec.contract import METRICS_SINKS, REPORTED_METRICS
from compiler.targets.sagemaker import translate
from entrypoint.trainer.metrics import SINKS

RECORD = {
    "step": 40,
    "loss": 2.5e-05,
    "val_loss": 3.25,
    "lr": 3e-4,
    "grad_norm": 0.75,
    "tokens_per_s": 91234.5,
    "mfu": 0.4125,
}


def test_the_planner_knows_the_trainers_sinks():
    assert set(SINKS) == set(METRICS_SINKS)


def test_a_jsonl_line_is_read_by_sagemaker_and_by_the_run_reader(tmp_path):
    printed = io.StringIO()
    sink = SINKS["jsonl"](tmp_path / "output/data", printed)
    sink.write(RECORD)
    sink.close()
    found = {}
    for definition in translate.metric_definitions():
        match = re.search(definition["Regex"], printed.getvalue())
        assert match, definition
        found[definition["Name"]] = float(match.group(1))
    assert found == {name: RECORD[name] for name in REPORTED_METRICS}
    assert runs.loss_curve(tmp_path) == [RECORD]
