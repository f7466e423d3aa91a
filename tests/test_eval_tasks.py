"""`trainer.eval_tasks`: a run on two real torchrun ranks (gloo, CPU) scores its model as it stands on local task
YAMLs every `trainer.eval_tasks_interval` steps and after the last step, rank 0 running the harness while the
other rank waits; the scores land in metrics.jsonl and in a real MLflow server at their steps, the harness's
results beside them, and the final scores are the harness's own on the exported model."""

import pytest

from compiler.spec.scores import scores
from entrypoint.evaluation import newest_results
from tests.entrypoint_support import metrics, tiny_plan, train
from tests.eval_support import TASKS, tiny_model, write_tasks
from tests.text_corpus import conversations, write_jsonl

pytestmark = pytest.mark.torchrun


def test_a_run_logs_its_task_scores_to_metrics_and_mlflow(tmp_path, hf_tokenizer, mlflow_server):
    from mlflow.tracking import MlflowClient

    model = tiny_model(tmp_path / "model", hf_tokenizer)
    tasks = write_tasks(tmp_path / "tasks")
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"messages": conversation} for conversation in conversations(100)])
    plan = tiny_plan(
        "model=hf",
        f"model.path={model}",
        *("data=local", f"data.path={data}", "data.format=chat"),
        f"trainer.eval_tasks=[{','.join(TASKS)}]",
        "trainer.eval_tasks_interval=3",
        f"eval.include_path={tasks}",
        "eval.limit=2",
        "trainer.trackers=[mlflow]",
        f"trainer.mlflow.tracking_uri={mlflow_server}",
        "trainer.mlflow.experiment=task-scores",
    )
    root = tmp_path / "run"
    train(plan, root, timeout=400)

    scored = {record["step"]: scores_of(record) for record in metrics(root) if scores_of(record)}
    assert list(scored) == [3, 6]
    for step, found in scored.items():
        assert {"eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"} <= set(found), found
        results = newest_results(root / f"output/data/eval/step-{step:08d}")
        assert scores(results["results"]) == found  # the harness's own numbers, at the step they were taken
        assert str(root / ("checkpoints/eval-model" if step == 3 else "model")) in str(results["config"]["model_args"])
    assert not (root / "checkpoints/eval-model").exists()  # the copy scored mid-run is let go

    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("task-scores").experiment_id])
    assert run.info.status == "FINISHED"
    for name in ("eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [(metric.step, metric.value) for metric in history] == [(s, found[name]) for s, found in scored.items()]


def scores_of(record: dict) -> dict[str, float]:
    return {key: value for key, value in record.items() if key.startswith("eval/")}
