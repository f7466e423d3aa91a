"""`python -m entrypoint.evaluation --plan PATH`: what an evaluation job runs (`dockyard eval`, a plan with an
`eval` section), once, on its one node: EleutherAI's lm-evaluation-harness with its Hugging Face backend on
the model at `model.path` (with `eval.adapter`, a PEFT adapter on it: `peft=`), exactly as a user runs
`lm_eval --model hf` by hand; on a node of several GPUs under `accelerate launch`, a process a GPU (data
parallel), and on a CPU node in one process with its cores.

The harness writes its results JSON and samples into the job's output folder (`output/data/eval`); the
scores also go into the metrics file as one line (`eval/<task>/<metric>`), which the host reads back. The
harness runs in the folder of the plan's own tasks (the image's copy of `eval.include_path`), so data files
named relative to it resolve.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.contract import EVAL_ADAPTER_DIR, EVAL_DIR, EVAL_TASKS_DIR, METRICS_FILE, METRICS_SEPARATORS
from compiler.spec.scores import scores
from entrypoint.launcher.cluster import SAGEMAKER_ROOT, Paths
from entrypoint.trainer.models.source import checkpoint_folder, fetch

RESULTS = "results_*.json"
"""The harness's results file, one per run, under a folder named after the model (`<output>/<model>/`)."""


def harness_command(plan: Plan, model: Path, output: Path, tasks: list[str], gpus: int) -> list[str]:
    """The harness's command line scoring the model folder `model` on `tasks` with the plan's options, on
    `gpus` GPUs (data parallel when several)."""
    evaluation = plan.eval
    if evaluation is None:
        raise ValueError("the plan has no eval section")
    harness = [sys.executable, "-m", "lm_eval"]
    if gpus > 1:  # data parallel, one process a GPU, as the harness documents it
        harness = [sys.executable, "-m", "accelerate.commands.launch", f"--num_processes={gpus}", "-m", "lm_eval"]
    model_args = f"pretrained={model}" + (f",peft={adapter_folder(plan)}" if evaluation.adapter else "")
    command = [*harness, "run", "--model", "hf", "--model_args", model_args]
    command += ["--tasks", ",".join(tasks), "--batch_size", str(evaluation.batch_size)]
    command += ["--device", "cuda" if plan.instance.has_gpus else "cpu"]
    command += ["--output_path", str(output), "--log_samples"]
    if evaluation.include_path:
        command += ["--include_path", str(tasks_folder(plan))]
    if evaluation.limit is not None:
        command += ["--limit", f"{evaluation.limit:g}"]
    if evaluation.num_fewshot is not None:
        command += ["--num_fewshot", str(evaluation.num_fewshot)]
    if evaluation.seed is not None:
        command += ["--seed", str(evaluation.seed)]
    return command


def tasks_folder(plan: Plan) -> Path:
    """The plan's own tasks (`eval.include_path`)."""
    return carried(EVAL_TASKS_DIR, plan.eval.include_path if plan.eval else "")


def adapter_folder(plan: Plan) -> Path:
    """The PEFT adapter scored on the model (`eval.adapter`)."""
    return carried(EVAL_ADAPTER_DIR, plan.eval.adapter if plan.eval else "")


def carried(image_copy: str, planned: str) -> Path:
    """A folder the evaluation's image carries: the image's copy, or, for a trainer started by hand on the
    machine that made the plan (no image), the folder the planner checked."""
    return Path(image_copy) if Path(image_copy).is_dir() or not planned else Path(planned)


def score(
    plan: Plan, model: Path, output: Path, tasks: list[str], gpus: int, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Run the harness (in the task folder, so data files named relative to it resolve, and in `env`, else this
    process's environment); its scores as metrics (`eval/<task>/<metric>`). A failed harness raises, its own
    output above."""
    command = harness_command(plan, model, output, tasks, gpus)
    print("evaluating: " + " ".join(command), flush=True)
    workdir = tasks_folder(plan) if plan.eval and plan.eval.include_path else None
    subprocess.run(command, cwd=workdir, env=env, check=True)
    return scores(newest_results(output)["results"])


def newest_results(output: Path) -> dict:
    found = sorted(output.rglob(RESULTS), key=lambda path: path.name)
    if not found:
        raise FileNotFoundError(f"the harness wrote no {RESULTS} under {output}")
    return json.loads(found[-1].read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m entrypoint.evaluation")
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args(argv)
    plan = Plan.from_json(args.plan.read_text())
    paths = Paths(Path(os.environ.get("DOCKYARD_ROOT", str(SAGEMAKER_ROOT))))
    model, fetched = checkpoint_folder(plan.model.path, paths)
    if fetched:
        fetch(plan.model.path, model, plan.model.revision)
    tasks = plan.eval.tasks if plan.eval else []
    try:
        found = score(plan, model, paths.output / EVAL_DIR, tasks, plan.instance.gpus)
    except subprocess.CalledProcessError as error:
        sys.exit(error.returncode)
    line = json.dumps({"step": 0, **found}, separators=METRICS_SEPARATORS)
    with (paths.output / METRICS_FILE).open("a") as metrics:
        metrics.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
