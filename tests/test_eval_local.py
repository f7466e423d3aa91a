"""The proof of `dockyard eval`: on the local target, a LoRA adapter (peft's own folder) on a tiny Hugging Face
model, evaluated on its base without merging, on a multiple-choice and a generation task written as the
harness's own task YAMLs, scores exactly what `lm_eval --model hf --model_args pretrained=BASE,peft=ADAPTER`
run by hand on the same folders, tasks and options scores; the base travels with the job as any model does,
the adapter in the image; the results JSON and samples land in the run's `eval/`, the scores in its metrics,
and the terminal shows them as a table.

The harness by hand runs while the job does (each is a process of its own), so the test waits for the longer
of the two rather than their sum."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.launch import evaluation
from compiler.spec import Plan
from compiler.spec.contract import EVAL_ADAPTER_DIR
from compiler.spec.scores import scores
from entrypoint.evaluation import newest_results
from tests.eval_support import TASKS, tiny_adapter, tiny_model, write_tasks
from tests.helpers import unconstrained_packages

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
LIMIT = 4


def test_dockyard_eval_scores_an_adapter_as_lm_eval_does_by_hand(engine, tmp_path, hf_tokenizer):
    base = tiny_model(tmp_path / "model", hf_tokenizer)
    adapter = tiny_adapter(tmp_path / "adapter", base)
    tasks = write_tasks(tmp_path / "tasks")
    by_hand = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={base},peft={adapter}"]
    by_hand += ["--tasks", ",".join(TASKS), "--include_path", str(tasks), "--limit", str(LIMIT), "--log_samples"]
    by_hand += ["--batch_size", "1", "--device", "cpu", "--output_path", str(tmp_path / "by-hand")]
    log = tmp_path / "by-hand.log"
    direct = subprocess.Popen(by_hand, cwd=tasks, stdout=log.open("w"), stderr=subprocess.STDOUT)

    command = [DOCKYARD, "eval", "model=hf", f"model.path={adapter}", f"eval.tasks=[{','.join(TASKS)}]"]
    command += [f"eval.include_path={tasks}", f"eval.limit={LIMIT}", "hardware.nodes=1", "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800)  # a cold build
    assert direct.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    plan = Plan.from_json((run_dir / "plan.json").read_text())
    assert (plan.model.path, plan.eval and plan.eval.adapter) == (str(base), str(adapter))  # the base travels
    results = newest_results(run_dir / "eval")
    assert results["config"]["model_args"]["peft"] == EVAL_ADAPTER_DIR  # the image's copy, unmerged
    dockyard, expected = scores(results["results"]), scores(newest_results(tmp_path / "by-hand")["results"])

    assert {"eval/dockyard_mc/acc", "eval/dockyard_gen/exact_match"} <= set(expected), expected
    assert dockyard == expected
    # the choices' log-likelihoods, which differ with any change of weights (the adapter's B is random)
    found = loglikelihoods(run_dir / "eval")
    assert len(found) == 4 * LIMIT and found == pytest.approx(loglikelihoods(tmp_path / "by-hand"), rel=1e-5)
    threads = r"OMP_NUM_THREADS=(\d+)  # \1 CPUs split among the training processes on this machine: 1 node\(s\) × 1"
    assert re.search(threads, result.stdout), result.stdout[-3000:]  # the harness's one process takes every CPU
    table = result.stdout[result.stdout.index("task ") :]
    for task, metric, value, _ in evaluation.latest_scores(run_dir):
        assert f"{task}  " in table and metric in table and f"{value:8.4f}" in table
    assert len(evaluation.latest_scores(run_dir)) == len([k for k in expected if not k.endswith("_stderr")])

    image = json.loads((run_dir / "image.json").read_text())["reference"]
    freeze = engine.containers.run(image, ["pip", "freeze"], entrypoint=[], remove=True, network_mode="none")
    assert unconstrained_packages(freeze.decode(), plan) == []


def loglikelihoods(output: Path) -> list[float]:
    """The multiple-choice task's samples: each document's four choices' log-likelihoods, in document order."""
    (samples,) = output.rglob("samples_dockyard_mc_*.jsonl")
    records = sorted((json.loads(line) for line in samples.read_text().splitlines()), key=lambda r: r["doc_id"])
    return [float(choice[0]) for record in records for choice in record["filtered_resps"]]
