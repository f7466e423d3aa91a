"""`dockyard eval`'s plan, image and checks, without a job: what an evaluation plan holds, what its image
installs and carries, the harness's command line on the node, and every mistake refused in one line before
anything is built (an unknown task, a task file that does not parse or whose data is missing, a model that
was never exported)."""

import json
import shutil
from pathlib import Path

import pytest

from compiler.images.context import build_context
from compiler.images.render import render_dockerfile
from compiler.launch.evaluation import overrides_for_run
from compiler.launch.runs import final_metrics
from compiler.launch.summary import time_to_loss
from compiler.spec import Plan
from compiler.spec.contract import EVAL_TASKS_DIR
from compiler.spec.schema import Job
from compiler.spec.scores import score_rows, scores
from compiler.targets import records
from compiler.targets.records import RunRecord
from entrypoint.evaluation import harness_command
from tests.eval_support import TASKS, tiny_model, write_tasks
from tests.helpers import plan_for
from tests.hostile import invoke


@pytest.fixture(scope="module")
def model(tmp_path_factory, hf_tokenizer) -> Path:
    return tiny_model(tmp_path_factory.mktemp("eval") / "model", hf_tokenizer)


@pytest.fixture
def tasks(tmp_path) -> Path:
    return write_tasks(tmp_path / "tasks")


def evaluation(model: Path, tasks: Path, *more: str) -> list[str]:
    tasks_given = [f"eval.tasks=[{','.join(TASKS)}]", f"eval.include_path={tasks}"]
    return ["model=hf", f"model.path={model}", *tasks_given, "job=evaluate", *more]


def test_an_evaluation_plan_holds_its_tasks_and_a_training_plan_is_as_before(model, tasks):
    plan = plan_for(*evaluation(model, tasks, "eval.limit=4", "hardware.nodes=1"))
    assert plan.eval is not None and plan.eval.tasks == TASKS and plan.eval.limit == 4
    assert Plan.from_json(plan.to_json()) == plan
    training = plan_for("model=hf", f"model.path={model}")
    assert training.eval is None and "eval" not in training.to_dict()


def test_the_image_installs_the_harness_and_carries_the_task_folder(model, tasks, tmp_path):
    plan = plan_for(*evaluation(model, tasks, "hardware.nodes=1"))
    dockerfile = render_dockerfile(plan)
    assert "'lm_eval[hf]==0.4.13'" in dockerfile and "peft==" in dockerfile
    assert f"COPY eval_tasks/ {EVAL_TASKS_DIR}/" in dockerfile
    context = build_context(plan, cwd=tmp_path)
    assert {"eval_tasks/mc.yaml", "eval_tasks/gen.yaml", "eval_tasks/data/mc.jsonl"} <= set(context.files)
    assert build_context(plan, cwd=tmp_path).tag == context.tag  # the same files make the same image
    (tasks / "data/mc.jsonl").write_text('{"question": "q", "choices": [" a"], "answer": 0}\n')
    assert build_context(plan, cwd=tmp_path).tag != context.tag  # a task's data is in the image's hash


def test_the_node_runs_the_harness_as_a_user_would(model, tasks):
    plan = plan_for(*evaluation(model, tasks, "eval.limit=4", "eval.num_fewshot=0", "eval.seed=7", "hardware.nodes=1"))
    command = harness_command(plan, Path("/m"), Path("/out"), TASKS, plan.instance.gpus)
    assert command[1:] == [
        "-m", "lm_eval", "run", "--model", "hf", "--model_args", "pretrained=/m", "--tasks", "dockyard_mc,dockyard_gen",
        "--batch_size", "1", "--device", "cpu", "--output_path", "/out", "--log_samples",
        "--include_path", str(tasks), "--limit", "4", "--num_fewshot", "0", "--seed", "7",
    ]  # fmt: skip


def test_several_gpus_evaluate_in_data_parallel_under_accelerate(model, tasks):
    gpus = ("target=sagemaker", "hardware=ml.g5.12xlarge", "target.role_arn=arn:aws:iam::123456789012:role/r")
    plan = plan_for(*evaluation(model, tasks, "hardware.nodes=1"), *gpus)
    command = harness_command(plan, Path("/m"), Path("/out"), TASKS, plan.instance.gpus)
    assert command[1:7] == ["-m", "accelerate.commands.launch", "--num_processes=4", "-m", "lm_eval", "run"]
    assert command[command.index("--device") + 1] == "cuda"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda t: None, "eval.tasks: unknown task 'dockyard_mcq'; did you mean dockyard_mc"),
        (lambda t: (t / "mc.yaml").write_text("task: [unclosed\n"), "mc.yaml is not YAML the harness reads"),
        (lambda t: (t / "data/mc.jsonl").unlink(), "data/mc.jsonl (a data file of mc.yaml) does not exist"),
        (lambda t: (t / "gen.yaml").write_text("- a list\n"), "gen.yaml is not a task"),
    ],
)
def test_a_task_the_harness_cannot_run_is_one_line_and_nothing_is_built(model, tasks, tmp_path, change, error):
    change(tasks)
    names = "[dockyard_mcq]" if "unknown" in error else f"[{','.join(TASKS)}]"
    args = ["eval", "model=hf", f"model.path={model}", f"eval.tasks={names}", f"eval.include_path={tasks}"]
    outcome = invoke(args, tmp_path)
    assert outcome.status == 2, outcome.stderr
    assert len(outcome.stderr.splitlines()) == 1 and error in outcome.stderr, outcome.stderr
    assert not outcome.created


def test_a_model_that_is_no_hugging_face_folder_or_no_tasks_or_a_launch_with_tasks_are_refused(tmp_path, model):
    cases = [
        (["eval", "eval.tasks=[hellaswag]"], "model.path: an evaluation reads a Hugging Face model folder"),
        (["eval", "model=hf", f"model.path={model}"], "eval.tasks: is empty"),
        (["launch", "model=hf", f"model.path={model}", "eval.tasks=[x]"], "eval.tasks: evaluate a model under"),
    ]
    for args, error in cases:
        outcome = invoke(args, tmp_path)
        assert outcome.status == 2 and error in outcome.stderr, outcome.stderr
        assert not outcome.created


def test_a_training_run_scoring_tasks_carries_the_harness_and_its_tasks_and_still_trains(model, tasks):
    training = ["model=hf", f"model.path={model}", f"trainer.eval_tasks=[{TASKS[0]}]", f"eval.include_path={tasks}"]
    plan = plan_for(*training, "trainer.eval_tasks_interval=5")
    assert plan.eval is not None and plan.eval.include_path == str(tasks) and plan.job is Job.train
    assert Plan.from_json(plan.to_json()) == plan and plan.trainer.eval_tasks_interval == 5
    dockerfile = render_dockerfile(plan)
    assert "'lm_eval[hf]==0.4.13'" in dockerfile and f"COPY eval_tasks/ {EVAL_TASKS_DIR}/" in dockerfile


def test_a_training_runs_tasks_are_checked_as_an_evaluations_are(model, tasks, tmp_path):
    launch = ["launch", "--dry-run", "model=hf", f"model.path={model}", f"eval.include_path={tasks}"]
    cases = [
        ([*launch, "trainer.eval_tasks=[dockyard_mcq]"], "trainer.eval_tasks: unknown task 'dockyard_mcq'"),
        ([*launch, "trainer.eval_tasks=[dockyard_mc]", "model.lora.rank=4"], "model.lora.rank: trainer.eval_tasks"),
        ([*launch, "trainer.eval_tasks_interval=-1"], "trainer.eval_tasks_interval: is -1"),
        (["launch", "--dry-run", "trainer.eval_tasks=[hellaswag]"], "model: an evaluation reads a Hugging Face"),
    ]
    for args, error in cases:
        outcome = invoke(args, tmp_path)
        assert outcome.status == 2 and error in outcome.stderr, outcome.stderr
        assert len(outcome.stderr.splitlines()) == 1 and not outcome.created


def test_a_runs_final_metrics_are_its_last_steps_record_and_the_task_scores_after_it(tmp_path):
    lines = [{"step": 5, "loss": 2.0, "elapsed_s": 1.0}, {"step": 6, "loss": 1.5, "elapsed_s": 1.2}]
    lines.append({"step": 6, "eval/mc/acc": 0.5})
    (tmp_path / "output/data").mkdir(parents=True)
    (tmp_path / "output/data/metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert final_metrics(tmp_path) == {"step": 6, "loss": 1.5, "elapsed_s": 1.2, "eval/mc/acc": 0.5}
    assert time_to_loss(lines, 1.5) == 1.2


def test_a_run_without_an_exported_model_is_refused(tmp_path):
    run_dir = tmp_path / "trained"
    run_dir.mkdir()
    records.save(RunRecord(run_dir=str(run_dir), run_id="trained-1", target="local", steps=2, status="failed"))
    outcome = invoke(["eval", "trained-1", "eval.tasks=[hellaswag]"], tmp_path)
    assert outcome.status == 2
    assert outcome.stderr.strip() == (
        f"dockyard: error: run: trained-1 has no exported model ({run_dir}/model/config.json); "
        "evaluate a run that finished training, or give model=hf model.path=FOLDER"
    )


def test_scores_keep_each_metric_and_filter_with_its_standard_error():
    results = {
        "mc": {"alias": "mc", "acc,none": 0.5, "acc_stderr,none": 0.25},
        "gen": {"exact_match,strict-match": 1.0, "exact_match_stderr,strict-match": "N/A", "samples": 4},
    }
    line = {"step": 0, **scores(results)}
    assert line == {"step": 0, "eval/gen/exact_match/strict-match": 1.0, "eval/mc/acc": 0.5, "eval/mc/acc_stderr": 0.25}
    assert score_rows(line) == [("gen", "exact_match/strict-match", 1.0, None), ("mc", "acc", 0.5, 0.25)]


def test_status_shows_an_evaluations_scores(tmp_path):
    run_dir = tmp_path / "evaluated"
    (run_dir / "output/data").mkdir(parents=True)
    line = {"step": 0, **scores({"mc": {"acc,none": 0.5, "acc_stderr,none": 0.25}})}
    (run_dir / "output/data/metrics.jsonl").write_text(json.dumps(line) + "\n")
    records.save(RunRecord(run_dir=str(run_dir), run_id="eval-1", target="local", steps=1, status="completed"))
    table = invoke(["status", "eval-1"], tmp_path)
    assert table.status == 0 and "score     mc acc 0.5000 ± 0.2500" in table.stdout.splitlines()
    shown = json.loads(invoke(["status", "eval-1", "-o", "json"], tmp_path).stdout)
    assert shown["scores"] == [{"task": "mc", "metric": "acc", "value": 0.5, "stderr": 0.25}]


def test_eval_has_its_usage(tmp_path):
    outcome = invoke(["eval", "--help"], tmp_path)
    assert outcome.status == 0 and outcome.stdout.startswith("usage: dockyard eval [RUN] [--dry-run]")
    assert "eval    [RUN] eval.tasks=[...]" in invoke(["--help"], tmp_path).stdout


def test_a_run_is_evaluated_with_its_own_overrides_and_its_export_on_one_node(tmp_path, tasks, model):
    run_dir = tmp_path / "trained"
    (run_dir / ".hydra").mkdir(parents=True)
    shutil.copytree(model, run_dir / "model")
    own = ["experiment=smoke", "model=hf", "model.path=/gone", "model.lora.rank=8", "trainer.steps=8"]
    (run_dir / ".hydra/overrides.yaml").write_text("".join(f"- {o}\n" for o in own))
    record = records.save(RunRecord(run_dir=str(run_dir), run_id="trained-2", target="local", status="completed"))
    new = ["eval.tasks=[dockyard_mc]", f"eval.include_path={tasks}"]
    plan = plan_for(*overrides_for_run(record, new), "job=evaluate")
    assert (plan.model.path, plan.model.lora.rank, plan.layout.nodes) == (str(run_dir / "model"), 0, 1)
    assert plan.trainer.steps == 8 and plan.eval is not None and plan.eval.tasks == ["dockyard_mc"]
    outcome = invoke(["eval", "--dry-run", "trained-2", *new], tmp_path)
    assert outcome.status == 0, outcome.stderr
    (container,) = json.loads(outcome.stdout)["containers"]
    mounts = {mount["target"]: mount["source"] for mount in container["mounts"]}
    assert mounts["/opt/ml/input/data/pretrained"] == str(run_dir / "model")  # the export, as the channel


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("eval.lm_eval='0.4.13\nRUN curl x | sh'", "eval.lm_eval"),
        ("eval.tasks=['dockyard_mc\nRUN id']", "eval.tasks"),
        ("eval.include_path='/nowhere\n$(id)'", "eval.include_path"),
        ("eval.limit=-1", "eval.limit"),
        ("eval.limit=2.5", "eval.limit"),
        ("eval.batch_size=0", "eval.batch_size"),
    ],
)
def test_a_hostile_or_wrong_eval_value_is_one_line_naming_its_key(model, tasks, tmp_path, override, key):
    args = [
        "plan",
        "model=hf",
        f"model.path={model}",
        "eval.tasks=[dockyard_mc]",
        f"eval.include_path={tasks}",
        "job=evaluate",
    ]
    outcome = invoke([*args, override], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == [key], outcome.stderr
    assert "\nRUN" not in outcome.stderr.strip() and not outcome.created
