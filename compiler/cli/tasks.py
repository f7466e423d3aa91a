"""The Hydra tasks behind the verbs: each gets the composed config and works in Hydra's run folder.

A task writes into this invocation's staging folder and its results move into the run folder only when
it succeeds (`compiler.cli.folders`), so a user's mistake leaves nothing half-written and removes nothing
that another command, or the user, put there.

What only `launch` needs (run records, the targets' I/O, progress, resumption) is imported by the launch
tasks themselves, so `dockyard plan` starts without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from compiler.cli import folders
from compiler.config.compose import to_config
from compiler.config.project import project_dir
from compiler.launch import modes
from compiler.launch.plan import PLAN_FILE, REPORT_FILE, checked_plan, with_account_defaults, write_plan
from compiler.planner.summary import report_markdown, summary_lines
from compiler.spec import Plan
from compiler.spec.errors import ConfigError, PlatformError
from compiler.spec.schema import Config, Job

if TYPE_CHECKING:
    from compiler.launch.resume import Resume


def run_folder() -> Path:
    return Path(HydraConfig.get().runtime.output_dir).resolve()


def compile_into(config: Config, stage: Path, run_dir: Path, chat_date: str | None = None) -> Plan:
    """Compile, print the summary, and write plan.json and report.md (into `stage`, bound for `run_dir`)."""
    plan = checked_plan(config, chat_date)
    write_plan(plan, stage)
    (stage / REPORT_FILE).write_text(report_markdown(plan))
    print("\n".join(summary_lines(plan)))
    print(f"wrote     {run_dir / PLAN_FILE} and {REPORT_FILE}")
    return plan


def plan_task(cfg: DictConfig) -> None:
    """Compile the config into a plan, print its summary, write plan.json and report.md to the run folder."""
    run_dir = run_folder()
    with folders.results_in(run_dir) as stage:
        compile_into(to_config(cfg), stage, run_dir)


def build_task(cfg: DictConfig) -> None:
    """`plan`, then build the plan's image (nothing when its content hash is built), push it if asked."""
    from compiler.images.workflow import build_and_record  # the Docker SDK only for these verbs

    run_dir = run_folder()
    with folders.results_in(run_dir) as stage:
        build_and_record(
            compile_into(to_config(cfg), stage, run_dir), run_dir, cwd=project_dir(HydraConfig.get()), stage=stage
        )


@modes.sweeps_as(modes.LAUNCH)
def launch_task(cfg: DictConfig) -> None:
    """`build`, then translate the plan for its target and submit it; exits with the job's status. What the
    target refuses without a side effect (a role, a bucket, a quota) is refused before the build."""
    _launch(cfg, None)


def eval_task(cfg: DictConfig) -> None:
    """`dockyard eval`: `launch` of a plan that evaluates `model.path` with lm-evaluation-harness; the scores
    are printed as a table and the harness's results kept in the run folder's `eval/`."""
    _launch(cfg, None)


def resume_task(resuming: Resume) -> Callable[[DictConfig], None]:
    """`launch --resume RUN`: the launch of the run's next attempt (see `compiler.launch.resume`)."""

    def launch_task(cfg: DictConfig) -> None:
        _launch(cfg, resuming)

    return launch_task


def _launch(cfg: DictConfig, resuming: Resume | None) -> None:
    from compiler.images.build import planned_reference
    from compiler.images.workflow import build_and_record
    from compiler.launch import base_scores, evaluation, runs
    from compiler.launch.progress import for_people
    from compiler.launch.resume import check_reshard, keep_attempt, resumed_record
    from compiler.targets import records
    from compiler.targets.base import COMPLETED

    run_dir = run_folder()
    with folders.results_in(run_dir) as stage:
        config = with_account_defaults(to_config(cfg))
        if resuming is not None:
            check_reshard(resuming.plan, checked_plan(config))
        plan = compile_into(config, stage, run_dir, resuming.plan.chat_date if resuming else None)
        run_id = runs.run_id_for(plan, datetime.now(UTC)) if resuming is None else resuming.job_id
        planned = runs.dry_run_image(plan, planned_reference(plan, cwd=project_dir(HydraConfig.get())))
        runs.preflight(plan, runs.translate(plan, planned, run_id, run_dir))  # refusals before any side effect
        built = build_and_record(plan, run_dir, cwd=project_dir(HydraConfig.get()), stage=stage)
        if resuming is not None:
            keep_attempt(resuming)
        request = runs.translate(plan, built.digest or built.reference, run_id, run_dir)
        runs.print_notes(plan, request)
    record = runs.new_record(plan, request, run_dir, request.image)
    if resuming is not None:
        record = resumed_record(resuming, record)
    try:
        out = for_people(sys.stdout, plan.trainer.steps)
        record = runs.execute(record, plan, request, out=out)  # a refused submit is undone
    except (ConfigError, PlatformError):
        folders.discard(results_too=True)
        raise
    if record.status in records.OPEN_STATUSES:
        return  # a detached remote job
    evaluating = plan.job is Job.evaluate
    if evaluating or plan.trainer.eval_tasks:
        evaluation.keep_results(run_dir)
    runs.print_results(record)
    if evaluating:
        base_scores.keep(plan, evaluation.latest_scores(run_dir))
        evaluation.print_scores(run_dir, sys.stdout, base_scores.base_scores(plan))
    if record.status != COMPLETED:
        sys.exit(record.exit_status or 1)


@modes.sweeps_as(modes.DRY_RUN)
def dry_run_task(cfg: DictConfig) -> None:
    """Print the plan's summary and warnings, and what the target would do besides (stderr), then exactly
    the request `launch` would submit (stdout); build nothing, start nothing, keep no run folder (`dockyard
    eval --dry-run` too: the evaluation's job)."""
    from compiler.images.build import planned_reference
    from compiler.launch import runs
    from compiler.launch.prepare import prepare

    run_dir = run_folder()
    config = to_config(cfg)
    with folders.results_in(run_dir, keep=False):
        prepared = prepare(
            config,
            run_dir,
            run_id=lambda plan: runs.run_id_for(plan, datetime.now(UTC)),
            planned=lambda plan: planned_reference(plan, cwd=project_dir(HydraConfig.get())),
        )
        print("\n".join(summary_lines(prepared.plan)), file=sys.stderr)
        runs.print_notes(prepared.plan, prepared.request)
        if prepared.plan.image.push:
            print(f"dockyard: {prepared.image} is built and pushed at launch, which pins it by digest", file=sys.stderr)
        sys.stderr.flush()
        print(prepared.request, end="")
