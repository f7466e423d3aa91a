"""The proof of `dockyard eval`: on the local target, a tiny Hugging Face model evaluated on a multiple-choice
and a generation task written as the harness's own task YAMLs scores exactly what `lm_eval --model hf` run
by hand on the same folder, tasks and options scores; the results JSON and samples land in the run's
`eval/`, the scores in its metrics, and the terminal shows them as a table."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.launch import evaluation
from compiler.spec import Plan
from compiler.spec.scores import scores
from entrypoint.evaluation import newest_results
from tests.eval_support import TASKS, tiny_model, write_tasks
from tests.helpers import unconstrained_packages

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
LIMIT = 4


def test_dockyard_eval_scores_what_lm_eval_scores_by_hand(engine, tmp_path, hf_tokenizer):
    model = tiny_model(tmp_path / "model", hf_tokenizer)
    tasks = write_tasks(tmp_path / "tasks")
    command = [DOCKYARD, "eval", "model=hf", f"model.path={model}", f"eval.tasks=[{','.join(TASKS)}]"]
    command += [f"eval.include_path={tasks}", f"eval.limit={LIMIT}", "hardware.nodes=1", "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800)  # a cold build
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    dockyard = scores(newest_results(run_dir / "eval")["results"])

    by_hand = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model}"]
    by_hand += ["--tasks", ",".join(TASKS), "--include_path", str(tasks), "--limit", str(LIMIT)]
    by_hand += ["--batch_size", "1", "--device", "cpu", "--output_path", str(tmp_path / "by-hand")]
    direct = subprocess.run(by_hand, cwd=tasks, capture_output=True, text=True, timeout=600)
    assert direct.returncode == 0, direct.stderr[-3000:]
    expected = scores(newest_results(tmp_path / "by-hand")["results"])

    assert {"eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"} <= set(expected), expected
    assert dockyard == expected
    assert list((run_dir / "eval").rglob("samples_dockyard_mc_*.jsonl"))
    threads = r"OMP_NUM_THREADS=(\d+)  # \1 CPUs split among the training processes on this machine: 1 node\(s\) × 1"
    assert re.search(threads, result.stdout), result.stdout[-3000:]  # the harness's one process takes every CPU
    table = result.stdout[result.stdout.index("task ") :]
    for task, metric, value, _ in evaluation.latest_scores(run_dir):
        assert f"{task}  " in table and metric in table and f"{value:8.4f}" in table
    assert len(evaluation.latest_scores(run_dir)) == len([k for k in expected if not k.endswith("_stderr")])

    image = json.loads((run_dir / "image.json").read_text())["reference"]
    freeze = engine.containers.run(image, ["pip", "freeze"], entrypoint=[], remove=True, network_mode="none")
    assert unconstrained_packages(freeze.decode(), Plan.from_json((run_dir / "plan.json").read_text())) == []
