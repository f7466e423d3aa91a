"""`trainer.eval_tasks`: the model as it stands scored by lm-evaluation-harness, as `dockyard eval` scores an
export, after the last step (on the exported model) and every `trainer.eval_tasks_interval` steps (on a copy
exported for it); the scores go to the run's metrics sinks (metrics.jsonl and the trackers) at that step. The
completions of `trainer.sample_prompts` (`entrypoint.trainer.samples`) are made on the same exported folder.

Rank 0 runs the harness as a child process on the exported folder, one GPU (or the CPUs), while the other
ranks wait at a barrier. This is the simplest correct way: the whole model is in one folder only after a
collective export, the harness loads it as any Hugging Face folder (no second model code path in the
trainer), and the barrier keeps every rank in step for the next training step or the run's end. The other
ranks wait no longer than the process group's timeout (DOCKYARD_TIMEOUT, 600 s unless the target sets it), so
an evaluation must fit in it: `eval.limit` keeps it short, as comparing a sweep's points needs.
"""

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from compiler.spec import Plan
from compiler.spec.contract import EVAL_DIR
from compiler.spec.schema import TrainerConfig
from entrypoint.evaluation import score
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer.metrics.base import MetricsSink
from entrypoint.trainer.samples import Prompt, complete, log_samples, samples_due

TORCHRUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_",
    "ROLE_",
    "MASTER_",
    "TORCHELASTIC_",
)
"""What torchrun tells rank 0 about its job (prefixes), left out of the harness's environment: with them, the
harness (through accelerate) would take itself for one rank of a distributed job and join rank 0's rendezvous."""
MODEL_COPY = "eval-model"
"""The folder (under the checkpoints) that an evaluation before the last step exports the model into."""


def scores_tasks(trainer: TrainerConfig, done_steps: int) -> bool:
    """Tasks scored every `eval_tasks_interval` steps and after the last step, when `eval_tasks` names any."""
    interval = trainer.eval_tasks_interval
    due = done_steps == trainer.steps or bool(interval and done_steps % interval == 0)
    return bool(trainer.eval_tasks) and due


def judged(trainer: TrainerConfig, done_steps: int) -> bool:
    """Whether the model is scored on tasks or completes the sample prompts after `done_steps`."""
    return scores_tasks(trainer, done_steps) or samples_due(trainer, done_steps)


def judge(
    plan: Plan,
    paths: Paths,
    model: Path,
    step: int,
    sinks: Sequence[MetricsSink],
    prompts: Sequence[Prompt],
    last: bool = False,
) -> None:
    """Rank 0 scores the exported `model` on the tasks and completes the `prompts` due at `step` (`last`: what is
    due after the last step, which an early stop makes `step`), writing both to its sinks at `step`; every rank
    calls it and leaves together (a failed harness fails the run on rank 0, which the others' barrier then
    reports)."""
    due = plan.trainer.steps if last else step
    if dist.get_rank() == 0:
        if scores_tasks(plan.trainer, due):
            output = paths.output / EVAL_DIR / f"step-{step:08d}"
            alone = {name: value for name, value in os.environ.items() if not name.startswith(TORCHRUN_VARIABLES)}
            found = score(plan, model, output, plan.trainer.eval_tasks, min(plan.instance.gpus, 1), alone)
            for sink in sinks:
                sink.write({"step": step, **found})
        if samples_due(plan.trainer, due):
            device = (
                torch.device("cuda", torch.cuda.current_device()) if plan.instance.has_gpus else torch.device("cpu")
            )
            log_samples(complete(plan, model, prompts, step, device), sinks)
        if model.name == MODEL_COPY:
            shutil.rmtree(model, ignore_errors=True)
    dist.barrier()
