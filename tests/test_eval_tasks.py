"""`trainer.eval_tasks`: a run on two real torchrun ranks (gloo, CPU) scores its model as it stands on local task
YAMLs every `trainer.eval_tasks_interval` steps and after the last step, rank 0 running the harness while the
other rank waits; the scores land in metrics.jsonl and in a real MLflow server at their steps, the harness's
results beside them (copied into the run folder's `eval/step-N/`, as a launch does when the run ends), and the
final scores are the harness's own on the exported model. At the same evaluations the model completes the first
held-out conversations' prompts (`trainer.sample_prompts`): samples.jsonl and the MLflow run's artifacts hold them,
the last ones what transformers' greedy generation makes of the exported model.

Two steps, scored after each (`eval_tasks_interval=1`): the fewest that show a mid-run evaluation (on a copy) and
the last one (on the export), each a harness process of its own, which is most of the test's time."""

import json
from pathlib import Path

import pytest

from compiler.launch.evaluation import keep_results
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
    held_out = conversations(4, seed=7)
    write_jsonl(data / "validation.jsonl", [{"messages": conversation} for conversation in held_out])
    plan = tiny_plan(
        "model=hf",
        f"model.path={model}",
        *("data=local", f"data.path={data}", "data.format=chat", "data.validation=validation.jsonl"),
        *("trainer.steps=2", "trainer.warmup_steps=1", "trainer.eval_batches=1"),
        "trainer.sample_prompts=2",
        "trainer.sample_max_new_tokens=5",
        f"trainer.eval_tasks=[{','.join(TASKS)}]",
        "trainer.eval_tasks_interval=1",
        f"eval.include_path={tasks}",
        "eval.limit=2",
        "trainer.trackers=[mlflow]",
        f"trainer.mlflow.tracking_uri={mlflow_server}",
        "trainer.mlflow.experiment=task-scores",
    )
    root = tmp_path / "run"
    train(plan, root, timeout=400)

    scored = {record["step"]: scores_of(record) for record in metrics(root) if scores_of(record)}
    assert list(scored) == [1, 2]
    assert keep_results(root) == root / "eval"  # what a launch does when the run ends: into the run folder
    for step, found in scored.items():
        assert {"eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"} <= set(found), found
        results = newest_results(root / f"eval/step-{step:08d}")
        assert results == newest_results(root / f"output/data/eval/step-{step:08d}")
        assert scores(results["results"]) == found  # the harness's own numbers, at the step they were taken
        assert str(root / ("checkpoints/eval-model" if step == 1 else "model")) in str(results["config"]["model_args"])
        assert list((root / f"eval/step-{step:08d}").rglob("samples_dockyard_mc_*.jsonl"))
    assert not (root / "checkpoints/eval-model").exists()  # the copy scored mid-run is let go

    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("task-scores").experiment_id])
    assert run.info.status == "FINISHED"
    for name in ("eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [(metric.step, metric.value) for metric in history] == [(s, found[name]) for s, found in scored.items()]

    samples = [json.loads(line) for line in (root / "output/data/samples.jsonl").read_text().splitlines()]
    prompts = [conversation[-2]["content"] for conversation in held_out[:2]]  # the user's turn before the reply
    by_step = {1: samples[:2], 2: samples[2:]}
    for step, taken in by_step.items():
        assert [(sample["step"], sample["prompt"]) for sample in taken] == [(step, prompt) for prompt in prompts]
        shown = client.download_artifacts(run.info.run_id, f"samples/step-{step:08d}.jsonl", str(tmp_path))
        assert [json.loads(line) for line in Path(shown).read_text().splitlines()] == taken
    assert [sample["completion"] for sample in by_step[2]] == greedy(root / "model", held_out[:2], 5)


def greedy(folder: Path, held_out: list[list[dict]], tokens: int) -> list[str]:
    """What transformers' greedy generation completes each conversation's prompt (before its reply) with."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    completions = []
    for conversation in held_out:
        prompt = conversation[:-1]
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True, return_tensors="pt")
        ids = ids["input_ids"]
        stop = tokenizer.eos_token_id
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, eos_token_id=stop, pad_token_id=stop)
        completions.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return completions


def scores_of(record: dict) -> dict[str, float]:
    return {key: value for key, value in record.items() if key.startswith("eval/")}
