"""One path from a plan's request to a finished run, shared by `dockyard launch` and every sweep point:
translate, submit, record, follow, stop. It asks the registry for the plan's target and never which kind
that is.
"""

import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import IO

from compiler.launch.plot import LOSS_PLOT, plot_losses
from compiler.planner.summary import predicted_seconds
from compiler.spec import Plan, files
from compiler.spec.contract import EVAL_DIR, METRICS_FILE, REPORTED_METRICS, RESTARTS_FILE, SAMPLES_FILE
from compiler.spec.errors import ConfigError, PlatformError, printable
from compiler.targets import records, registry
from compiler.targets.base import FINAL_STATUSES, PENDING, RUNNING, STOPPED, JobState, Request
from compiler.targets.records import RunRecord


def run_id_for(plan: Plan, now: datetime) -> str:
    """`<name>-<UTC time to the millisecond>`, as the SageMaker SDK names its jobs: two launches of one experiment
    in the same second on one engine get their own containers and network. A valid container, network,
    SageMaker job and DNS name (≤ 63 characters, with a sweep's `-<number>`)."""
    name = re.sub(r"[^a-zA-Z0-9]+", "-", plan.name).strip("-")[:36].lower() or "run"
    return f"{name}-{now:%Y%m%d-%H%M%S}-{now.microsecond // 1000:03d}"


def translate(plan: Plan, image: str, run_id: str, run_dir: Path) -> Request:
    return registry.get(plan.target.kind.value).to_request(plan, image, run_id=run_id, run_dir=run_dir)


def preflight(plan: Plan, request: Request) -> None:
    """The target's refusals that need no side effect (`Target.preflight`), before anything is built."""
    registry.get(plan.target.kind.value).preflight(request)


def print_notes(plan: Plan, request: Request, out: IO[str] | None = None) -> None:
    """What the target says it would do with the request besides running it (`Target.notes`)."""
    for note in registry.get(plan.target.kind.value).notes(request):
        print(f"dockyard: {request.run_id} {note}", file=out or sys.stderr)


def dry_run_image(plan: Plan, planned: str) -> str:
    """The image reference a dry run shows: what the target will be sent for the tag the build will make."""
    return registry.get(plan.target.kind.value).image_reference(plan, planned)


def new_record(plan: Plan, request: Request, run_dir: Path, image: str, **point) -> RunRecord:
    """The record of a job about to be submitted (`point`: a sweep's num and overrides)."""
    return RunRecord(
        run_dir=str(run_dir),
        run_id=request.run_id,
        target=plan.target.kind.value,
        image=image,
        steps=plan.trainer.steps,
        region=getattr(request, "region", ""),
        price_per_hour=plan.price_per_hour,
        predicted_s=predicted_seconds(plan),
        **point,
    )


def execute(
    record: RunRecord,
    plan: Plan,
    request: Request,
    *,
    wait: bool = True,
    out: IO[str] = sys.stdout,
    interrupted=None,
) -> RunRecord:
    """Submit the job and, unless `wait` is false for a target that runs jobs itself, follow it to its end.

    Ctrl-C (or `interrupted`) stops an attached job (local containers) and detaches from any other, whose
    record stays open for `dockyard status`, as does an error while following (the job runs on). A
    ConfigError or PlatformError from submitting (a missing role or bucket, a refusal) leaves nothing started.
    """
    target = registry.get(record.target)
    handle = target.submit(request, plan.to_json(), out=out)
    record = records.update(record, handle=handle, status=RUNNING if target.attached else PENDING, started=time.time())
    if not (wait or target.attached):
        return record
    if not target.attached:
        print(
            f"following {request.run_id} (Ctrl-C detaches, the job goes on: dockyard status {request.run_id})", file=out
        )
    try:
        state = target.follow(request, handle, out=out, interrupted=interrupted)
    except KeyboardInterrupt:
        if target.attached:
            records.update(record, status=STOPPED, detail="interrupted")
            raise
        print(f"detached from {request.run_id}", file=out)
        return record
    except (ConfigError, PlatformError) as error:  # the job runs on: keep its record, say why we let go
        if target.attached:
            raise
        print(f"detached from {request.run_id}: {error.one_line()}", file=out)
        return record
    if state is None:  # detached; the job goes on
        return record
    plot_run(Path(record.run_dir), record.run_id)
    return records.update(
        record,
        restarts=restarts_in(Path(record.run_dir)),
        status=state.status,
        detail=state.detail,
        exit_status=state.exit_status,
        attempts=state.attempts,
        final=dict(state.metrics) if state.metrics else final_metrics(Path(record.run_dir)),
        **billing(state),
    )


def billing(state: JobState) -> dict[str, float]:
    """The record fields of what the platform billed (none where it does not say)."""
    return dict(state.billing or {})


def refresh(record: RunRecord) -> RunRecord:
    """Ask the target about a run whose record is still open, or that keeps a warm pool after its end
    (the pool's state and time go on changing); the answer is written back."""
    target = registry.get(record.target) if record.handle else None
    if target is None or (record.status in FINAL_STATUSES and not target.capabilities.warm_pools):
        return record
    state = target.status(record.handle)
    changes: dict[str, object] = {"status": state.status, "detail": state.detail, "warm_pool": state.warm_pool}
    if state.metrics:
        changes["final"] = dict(state.metrics)
    if record.status in FINAL_STATUSES:  # a warm pool's news
        return records.update(record, **changes, **billing(state))
    return records.update_if_open(Path(record.run_dir), **changes, **billing(state))  # the launch may have ended it


def stop(record: RunRecord) -> RunRecord:
    """Stop a run whose record is open; one that has ended keeps its record (a completed run stays
    completed: `refresh` it first to learn whether it has ended)."""
    if record.status in FINAL_STATUSES:
        return record
    registry.get(record.target).stop(record.handle)
    return records.update_if_open(Path(record.run_dir), status=STOPPED)  # the launch may have recorded its end


METRICS_GLOBS = (f"nodes/*/output/data/{METRICS_FILE}", f"output/data/{METRICS_FILE}")
"""The trainer's metrics (one JSON object per logged step, written by the first rank) where the nodes'
outputs land in the run folder: one folder per node (the local target) or one the nodes share (Slurm)."""


def restarts_in(run_dir: Path) -> int:
    """The in-job restarts the trainer recorded where the nodes' outputs land in the run folder (0 where the
    output stays on the job's platform)."""
    return len(restart_events(run_dir))


def restart_events(run_dir: Path) -> list[dict]:
    """What the trainer recorded of each in-job restart (its cause, the checkpoint it resumed from, the steps
    lost), in the order they happened, where the nodes' outputs land in the run folder."""
    return [event for path in _restart_files(run_dir) for event in _json_lines(path)[0]]


def _restart_files(run_dir: Path) -> list[Path]:
    globs = (pattern.replace(METRICS_FILE, RESTARTS_FILE) for pattern in METRICS_GLOBS)
    return sorted({path for pattern in globs for path in run_dir.glob(pattern)})


def restart_text(event: dict) -> str:
    """`1 of 2: local rank 0 on node 1 (algo-2): killed by SIGKILL; resumed from step 5, 3 steps lost`."""
    names = ("restart", "of", "resumed_step", "steps_lost")
    restart, of, step, lost = ("?" if event.get(name) is None else printable(str(event[name])) for name in names)
    cause = printable(str(event.get("cause") or "cause unknown"))
    return f"{restart} of {of}: {cause}; resumed from step {step}, {lost} steps lost"


def metrics_file(run_dir: Path) -> Path | None:
    found = [path for pattern in METRICS_GLOBS for path in sorted(run_dir.glob(pattern))]
    return found[0] if found else None


def loss_curve(run_dir: Path) -> list[dict]:
    path = metrics_file(run_dir)
    return [] if path is None else _json_lines(path)[0]


def skipped_lines(run_dir: Path) -> dict[str, int]:
    """How many lines of each metrics or restarts log were skipped: a node killed mid-write leaves half a
    line, and a line that is no metrics line is not charted."""
    path = metrics_file(run_dir)
    logs = [*_restart_files(run_dir), *([] if path is None else [path])]
    return {str(log): count for log in logs if (count := _json_lines(log)[1])}


def _json_lines(path: Path) -> tuple[list[dict], int]:
    """The JSON objects of a log the nodes wrote, and the number of lines skipped (metrics lines that
    `_is_metrics_line` refuses count as skipped too)."""
    found, skipped = files.read_json_lines(path, "run")
    if path.name == METRICS_FILE:
        kept = [line for line in found if _is_metrics_line(line)]
        return kept, skipped + len(found) - len(kept)
    return found, skipped


def _is_metrics_line(line: dict) -> bool:
    """A step number, and a number (or nothing) for each value that is charted or reported."""
    values = [line.get(name) for name in ("step", "elapsed_s", *REPORTED_METRICS)]
    numbers = [v for v in values if v is not None and not isinstance(v, bool) and isinstance(v, int | float)]
    return type(line.get("step")) is int and len(numbers) == sum(v is not None for v in values)


def plot_run(run_dir: Path, run_id: str) -> Path | None:
    """`<run>/loss.png` from the metrics the nodes left in the run folder; None where there are none (a job
    whose output stays on its platform, one that stopped before its first record)."""
    curve = loss_curve(run_dir)
    if not curve:
        return None
    path = run_dir / LOSS_PLOT
    plot_losses([(run_id, curve)], f"loss, {run_id}", path)
    return path


def final_metrics(run_dir: Path) -> dict:
    """The last step's values: its record and the lines written at the same step after it (the task scores of
    `trainer.eval_tasks` follow the last step's record)."""
    curve = loss_curve(run_dir)
    last: dict = {}
    for line in curve:
        if line["step"] == curve[-1]["step"]:
            last |= line
    return last


def result_paths(run_dir: Path) -> dict[str, Path]:
    """What a run left in its folder, by kind (those it has)."""
    metrics = metrics_file(run_dir)
    found = {
        "metrics": metrics,
        "samples": None if metrics is None else metrics.parent / SAMPLES_FILE,
        "plot": run_dir / LOSS_PLOT,
        "logs": run_dir / "logs",
        "checkpoints": run_dir / "checkpoints",
        "model": run_dir / "model",
        "eval": run_dir / EVAL_DIR,
    }
    return {label: path for label, path in found.items() if path is not None and path.exists()}


def print_results(record: RunRecord, out: IO[str] = sys.stdout) -> None:
    """Where a finished run's results are."""
    outcome = (
        record.status if record.exit_status in (None, 0) else f"{record.status} (exit status {record.exit_status})"
    )
    print(f"run       {record.run_id} {outcome}", file=out)
    print(f"results   {record.run_dir}", file=out)
    for label, path in result_paths(Path(record.run_dir)).items():
        print(f"  {label:<11} {path}", file=out)
