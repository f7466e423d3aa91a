"""`python -m entrypoint.evaluation --plan PATH`: what an evaluation job runs (`dockyard eval`, a plan with an
`eval` section), once, on its one node: EleutherAI's lm-evaluation-harness with its Hugging Face backend on
the model at `model.path`, exactly as a user runs `lm_eval --model hf` by hand; on a node of several GPUs under
`accelerate launch`, a process a GPU (data parallel), and on a CPU node in one process with its cores.

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
from compiler.spec.contract import EVAL_DIR, EVAL_TASKS_DIR, METRICS_FILE, METRICS_SEPARATORS
from compiler.spec.scores import scores
from entrypoint.launcher.cluster import SAGEMAKER_ROOT, Paths
from entrypoint.trainer.models.source import checkpoint_folder, fetch

RESULTS = "results_*.json"
"""The harness's results file, one per run, under a folder named after the model (`<output>/<model>/`)."""


def harness_command(plan: Plan, model: Path, output: Path) -> list[str]:
    """The harness's command line for the plan's evaluation of the model folder `model`."""
    evaluation = plan.eval
    if evaluation is None:
        raise ValueError("the plan has no eval section")
    harness = [sys.executable, "-m", "lm_eval"]
    if plan.instance.gpus > 1:  # data parallel, one process a GPU, as the harness documents it
        harness = [sys.executable, "-m", "accelerate.commands.launch", f"--num_processes={plan.instance.gpus}"]
        harness += ["-m", "lm_eval"]
    command = [*harness, "run", "--model", "hf", "--model_args", f"pretrained={model}"]
    command += ["--tasks", ",".join(evaluation.tasks), "--batch_size", str(evaluation.batch_size)]
    command += ["--device", "cuda" if plan.instance.has_gpus else "cpu"]
    command += ["--output_path", str(output), "--log_samples"]
    if evaluation.include_path:
        command += ["--include_path", EVAL_TASKS_DIR]
    if evaluation.limit is not None:
        command += ["--limit", f"{evaluation.limit:g}"]
    if evaluation.num_fewshot is not None:
        command += ["--num_fewshot", str(evaluation.num_fewshot)]
    if evaluation.seed is not None:
        command += ["--seed", str(evaluation.seed)]
    return command


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
        fetch(plan.model.path, model)
    output = paths.output / EVAL_DIR
    command = harness_command(plan, model, output)
    print("evaluating: " + " ".join(command), flush=True)
    workdir = EVAL_TASKS_DIR if plan.eval and plan.eval.include_path else None
    status = subprocess.run(command, cwd=workdir).returncode
    if status:
        sys.exit(status)
    line = json.dumps({"step": 0, **scores(newest_results(output)["results"])}, separators=METRICS_SEPARATORS)
    with (paths.output / METRICS_FILE).open("a") as metrics:
        metrics.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
