"""A LoRA adapter evaluated on its base without merging, planned: `model.path` naming peft's adapter folder
becomes the plan's base (the folder its adapter_config.json names) with the adapter in `eval.adapter`; the
image carries the adapter, the harness gets `pretrained=BASE,peft=ADAPTER`, the base's own kept scores stand
beside the adapter's, and an adapter whose base cannot be found is one line, exit 2, nothing built.
(`tests/test_eval_local.py` runs it and finds the scores of the harness run by hand.)"""

import json
import shutil
from pathlib import Path

import pytest

from compiler.images.context import build_context
from compiler.images.render import render_dockerfile
from compiler.launch import base_scores
from compiler.spec.contract import EVAL_ADAPTER_DIR
from entrypoint.evaluation import harness_command
from tests.eval_support import TASKS, tiny_adapter, tiny_model, write_tasks
from tests.helpers import plan_for
from tests.hostile import invoke


@pytest.fixture(scope="module")
def folders(tmp_path_factory, hf_tokenizer) -> tuple[Path, Path, Path]:
    """A base model, a LoRA adapter saved on it by peft, and a task folder."""
    root = tmp_path_factory.mktemp("adapter")
    base = tiny_model(root / "base", hf_tokenizer)
    return base, tiny_adapter(root / "adapter", base), write_tasks(root / "tasks")


def evaluation(model: Path, tasks: Path, *more: str) -> list[str]:
    return ["model=hf", f"model.path={model}", f"eval.tasks=[{','.join(TASKS)}]", f"eval.include_path={tasks}", *more]


def test_an_adapter_is_planned_on_its_base_and_travels_in_the_image(folders, tmp_path):
    base, adapter, tasks = folders
    plan = plan_for(*evaluation(adapter, tasks, "job=evaluate", "hardware.nodes=1"))
    assert plan.eval is not None and (plan.model.path, plan.eval.adapter) == (str(base), str(adapter))
    assert f"COPY eval_adapter/ {EVAL_ADAPTER_DIR}/" in render_dockerfile(plan)
    context = build_context(plan, cwd=tmp_path)
    assert {"eval_adapter/adapter_config.json", "eval_adapter/adapter_model.safetensors"} <= set(context.files)
    command = harness_command(plan, Path("/m"), Path("/out"), TASKS, plan.instance.gpus)
    assert command[command.index("--model_args") + 1] == f"pretrained=/m,peft={adapter}"  # no image: the planner's
    explicit = plan_for(*evaluation(base, tasks, "job=evaluate", "hardware.nodes=1", f"eval.adapter={adapter}"))
    assert explicit == plan  # model.path=BASE eval.adapter=ADAPTER says the same
    whole = plan_for(*evaluation(base, tasks, "job=evaluate", "hardware.nodes=1"))
    assert whole.eval is not None and not whole.eval.adapter and "eval_adapter" not in render_dockerfile(whole)


def test_an_adapters_base_column_is_its_base_evaluated_alone(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKYARD_HOME", str(tmp_path / "home"))
    base, adapter, tasks = folders
    on_base = plan_for(*evaluation(adapter, tasks, "job=evaluate", "hardware.nodes=1"))
    assert base_scores.base_scores(on_base) == {}
    base_scores.keep(on_base, [("dockyard_mc", "acc", 0.75, 0.1)])  # the adapter's own: not its base's
    assert base_scores.base_scores(on_base) == {}
    alone = plan_for(*evaluation(base, tasks, "job=evaluate", "hardware.nodes=1"))
    base_scores.keep(alone, [("dockyard_mc", "acc", 0.25, 0.1)])
    assert base_scores.base_scores(on_base) == {"eval/dockyard_mc/acc": 0.25}


def test_an_adapter_whose_base_cannot_be_found_is_one_line_and_nothing_is_built(folders, tmp_path):
    base, adapter, tasks = folders
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(adapter, elsewhere)
    config = json.loads((elsewhere / "adapter_config.json").read_text())
    (elsewhere / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "org/llama"}))
    export = tmp_path / "run/model"  # a LoRA run's export: the merged model, its adapter inside, naming ".."
    shutil.copytree(base, export)
    shutil.copytree(adapter, export / "adapter")
    config = json.loads((export / "adapter/adapter_config.json").read_text())
    (export / "adapter/adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": ".."}))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cases = [
        (["eval", *evaluation(elsewhere, tasks)], "model.path", "whose base (base_model_name_or_path: 'org/llama'"),
        (["eval", *evaluation(export / "adapter", tasks)], "model.path", "the merged model around it"),
        (["eval", *evaluation(base, tasks), f"eval.adapter={base}"], "eval.adapter", "is not a PEFT adapter"),
        (["eval", *evaluation(export, tasks), f"eval.adapter={export / 'adapter'}"], "eval.adapter", "around it"),
        (["launch", "--dry-run", "model=hf", f"model.path={base}", f"eval.adapter={adapter}"], "eval.adapter", ""),
    ]
    for args, key, error in cases:
        outcome = invoke(args, cwd)
        assert outcome.status == 2 and outcome.error_keys == [key] and error in outcome.stderr, outcome.stderr
        assert len(outcome.stderr.splitlines()) == 1 and not outcome.created
