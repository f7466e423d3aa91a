"""`dockyard eval`: a run's exported model (or any Hugging Face folder) evaluated with lm-evaluation-harness
as a job on the plan's target, through the one launch path; this module holds what differs from a launch:
the command line a run becomes, and the scores read back from the run folder into a table.

`dockyard eval RUN [overrides]` composes the run's own overrides with the model pointed at its `model/`
export (adapters merged, so LoRA is off), on one node; the new overrides come last. The job's plan has an
`eval` section and the job evaluate, so the entrypoint runs the harness instead of the trainer
(`entrypoint.evaluation`).
"""

import shutil
from pathlib import Path
from typing import IO

from compiler.launch import runs
from compiler.launch.resume import run_overrides
from compiler.spec.contract import EVAL_DIR, EVAL_METRIC_PREFIX
from compiler.spec.errors import ConfigError, printable
from compiler.spec.scores import score_rows
from compiler.targets.records import RunRecord

EXPORT = "model"
"""The folder a run's exported model lands in (`compiler.launch.runs.result_paths`)."""
REPLACED = ("model", "hardware.nodes", "eval.", "job")
"""The run's overrides of these keys give way to the evaluation's."""


def overrides_for_run(record: RunRecord, new: list[str]) -> list[str]:
    """The command line of an evaluation of the run `record`'s exported model, `new` overrides last."""
    run_dir = Path(record.run_dir)
    export = run_dir / EXPORT
    if not (export / "config.json").is_file():
        raise ConfigError(
            "run",
            f"{record.run_id} has no exported model ({export}/config.json)",
            "evaluate a run that finished training, or give model=hf model.path=FOLDER",
        )
    own = [o for o in run_overrides(run_dir, "run") if not o.lstrip("+~").startswith(REPLACED)]
    return [*own, "model=hf", f"model.path={export}", "model.lora.rank=0", "hardware.nodes=1", *new]


def latest_scores(run_dir: Path) -> list[tuple[str, str, float, float | None]]:
    """(task, metric, value, stderr) of the newest scores in the run folder's metrics."""
    found = [rows for line in runs.loss_curve(run_dir) if (rows := score_rows(line))]
    return found[-1] if found else []


def keep_results(run_dir: Path) -> Path | None:
    """The harness's results and samples copied from where the job's output landed into `<run>/eval` (those of
    `trainer.eval_tasks` in a folder a step, `step-N`)."""
    metrics = runs.metrics_file(run_dir)
    source = None if metrics is None else metrics.parent / EVAL_DIR
    if source is None or not source.is_dir():
        return None
    return Path(shutil.copytree(source, run_dir / EVAL_DIR, dirs_exist_ok=True))


def print_scores(run_dir: Path, out: IO[str], base: dict[str, float] | None = None) -> None:
    """The newest scores as a table; with `base` (a metrics line's scores of the model the run started from,
    `compiler.launch.base_scores`), its value in a column beside."""
    found = latest_scores(run_dir)
    if not found:
        print("scores    none in the run folder (a remote job keeps its output on its platform)", file=out)
        return
    rows = [(printable(task), printable(name), value, stderr) for task, name, value, stderr in found]
    bases = [(base or {}).get(f"{EVAL_METRIC_PREFIX}{task}/{name}") for task, name, *_ in found]
    width = max(len("task"), *(len(task) for task, *_ in rows))
    metric_width = max(len("metric"), *(len(metric) for _, metric, *_ in rows))
    beside = f"  {'base':>8}" if base else ""
    print(f"{'task':<{width}}  {'metric':<{metric_width}}  {'value':>8}  {'stderr':>8}{beside}", file=out)
    for (task, metric, value, stderr), base_value in zip(rows, bases, strict=True):
        error = "" if stderr is None else f"{stderr:8.4f}"
        shown_base = "" if not base else "  " + ("" if base_value is None else f"{base_value:8.4f}").rjust(8)
        print(f"{task:<{width}}  {metric:<{metric_width}}  {value:8.4f}  {error:>8}{shown_base}", file=out)
