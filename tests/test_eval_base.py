"""The base model's scores beside a fine-tune's: the scores `dockyard eval` keeps for a model folder are found
again for a run that started from that folder, under the same settings only, and only while its files are the
same; the table then shows them in a column beside the fine-tune's."""

import io
import json
import shutil

import pytest

from compiler.launch import base_scores
from compiler.launch.evaluation import print_scores
from tests.eval_support import tiny_model, write_tasks
from tests.helpers import plan_for

BASE_ROWS = [("dockyard_mc", "acc", 0.25, 0.1), ("dockyard_gen", "exact_match", 0.0, 0.0)]
TUNED_LINE = {
    "step": 0,
    "eval/dockyard_mc/acc": 0.5,
    "eval/dockyard_mc/acc_stderr": 0.2,
    "eval/dockyard_gen/exact_match": 0.5,
}


@pytest.fixture
def folders(tmp_path, hf_tokenizer, monkeypatch):
    """A base checkpoint, a task folder, and a run folder that trained from the base (its plan and export)."""
    monkeypatch.setenv("DOCKYARD_HOME", str(tmp_path / "home"))
    base = tiny_model(tmp_path / "base", hf_tokenizer)
    tasks = write_tasks(tmp_path / "tasks")
    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.json").write_text(plan_for("model=hf", f"model.path={base}").to_json())
    shutil.copytree(base, run / "model")
    (run / "model/config.json").write_text((base / "config.json").read_text() + "\n")  # its own files
    return base, tasks, run


def evaluation(model, tasks, *more):
    return plan_for(
        "model=hf",
        f"model.path={model}",
        "eval.tasks=[dockyard_mc,dockyard_gen]",
        f"eval.include_path={tasks}",
        "eval.limit=2",
        "job=evaluate",
        *more,
    )


def test_a_fine_tune_finds_its_base_scores_under_the_same_settings(folders):
    base, tasks, run = folders
    base_scores.keep(evaluation(base, tasks), BASE_ROWS)

    assert base_scores.base_scores(evaluation(run / "model", tasks)) == {
        "eval/dockyard_mc/acc": 0.25,
        "eval/dockyard_gen/exact_match": 0.0,
    }
    assert base_scores.base_scores(evaluation(run / "model", tasks, "eval.limit=3")) == {}
    assert base_scores.base_scores(evaluation(run / "model", tasks, "eval.num_fewshot=1")) == {}
    (tasks / "data/mc.jsonl").write_text((tasks / "data/mc.jsonl").read_text() + "\n")  # other task data
    assert base_scores.base_scores(evaluation(run / "model", tasks)) == {}


def test_a_base_whose_weights_changed_has_no_scores(folders):
    base, tasks, run = folders
    base_scores.keep(evaluation(base, tasks), BASE_ROWS)
    (weights,) = base.glob("*.safetensors")
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x01")
    assert base_scores.base_scores(evaluation(run / "model", tasks)) == {}


def test_the_table_shows_the_base_value_beside(folders):
    base, tasks, run = folders
    base_scores.keep(evaluation(base, tasks), BASE_ROWS)
    (run / "output/data").mkdir(parents=True)
    (run / "output/data/metrics.jsonl").write_text(json.dumps(TUNED_LINE) + "\n")
    table = io.StringIO()
    print_scores(run, table, base_scores.base_scores(evaluation(run / "model", tasks)))
    assert table.getvalue().splitlines() == [
        "task          metric          value    stderr      base",
        "dockyard_mc   acc            0.5000    0.2000    0.2500",
        "dockyard_gen  exact_match    0.5000              0.0000",
    ]
    alone = io.StringIO()
    print_scores(run, alone)
    assert alone.getvalue().splitlines()[0] == "task          metric          value    stderr"


def test_a_run_planned_under_another_schema_version_still_names_its_base(folders):
    base, tasks, run = folders
    base_scores.keep(evaluation(base, tasks), BASE_ROWS)
    older = json.loads((run / "plan.json").read_text()) | {"schema_version": 5}
    (run / "plan.json").write_text(json.dumps(older))
    assert base_scores.base_scores(evaluation(run / "model", tasks))["eval/dockyard_mc/acc"] == 0.25
