"""What every metrics sink shares: its interface, what it is opened with, and the run's parameters."""

import json
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from compiler.spec import Plan


class RunEnd(Enum):
    """How the run ended, as a sink tells its tracker when it closes."""

    finished = "finished"
    stopped = "stopped"
    """SIGTERM (`dockyard stop`, a spot interruption, a time limit) after a checkpoint."""
    failed = "failed"


@dataclass(frozen=True)
class Sample:
    """One of `trainer.sample_prompts` and what the model made of it at an evaluation's step."""

    step: int
    prompt: str
    completion: str


class MetricsSink(Protocol):
    def write(self, record: dict[str, Any]) -> None: ...

    def write_samples(self, samples: list[Sample]) -> None:
        """The completions of one evaluation (all at one step), as the tracker shows text."""
        ...

    def close(self, end: RunEnd) -> None: ...


@dataclass(frozen=True)
class TrackedRun:
    """What a sink is opened with: the plan (its trackers' settings and the run's parameters), the job's
    output folder (where file-writing sinks write), and the run's id (DOCKYARD_RUN_ID, set by every target)."""

    plan: Plan
    output: Path
    run_id: str

    def params(self) -> dict[str, str]:
        """The run's hyperparameters and identity, as trackers show them next to the curves."""
        plan = self.plan
        layout, batch, par = plan.layout, plan.batch, plan.parallelism
        values: dict[str, Any] = {
            "run_id": self.run_id,
            "plan_hash": plan.content_hash,
            "image": plan.image.name,
            "image_base": plan.image.base,
            "target": plan.target.kind.value,
            "model": plan.model.name,
            "parameters": plan.parameters,
            "instance_type": plan.hardware.instance_type,
            "nodes": layout.nodes,
            "world_size": layout.world_size,
            "dp": layout.dp,
            "tp": layout.tp,
            "pp": layout.pp,
            "strategy": par.strategy.value,
            "mixed_precision": par.mixed_precision.value,
            "global_batch": batch.global_batch,
            "micro_batch": batch.micro_batch,
            "grad_accum": batch.grad_accum,
            "seq_len": batch.seq_len,
            "tokens_per_step": batch.tokens_per_step,
            "steps": plan.trainer.steps,
            "lr": plan.derived.lr,
            "lr_schedule": plan.trainer.lr_schedule.value,
            "warmup_steps": plan.derived.warmup_steps,
            "weight_decay": plan.trainer.weight_decay,
            "adam_betas": f"{plan.trainer.adam_beta1},{plan.trainer.adam_beta2}",
            "adam_epsilon": plan.trainer.adam_epsilon,
            "grad_clip": plan.trainer.grad_clip,
            "seed": plan.trainer.seed,
        }
        return {key: str(value) for key, value in values.items()}


def numbers(record: dict[str, Any]) -> dict[str, float]:
    """A record's measured values, without its step and without values a record leaves null (mfu on CPU)."""
    return {
        key: float(value)
        for key, value in record.items()
        if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
    }


def samples_jsonl(samples: list[Sample]) -> str:
    """The samples as JSON lines, one a sample (samples.jsonl's, and MLflow's artifact)."""
    return "".join(json.dumps(asdict(sample), ensure_ascii=False) + "\n" for sample in samples)


def samples_markdown(samples: list[Sample]) -> str:
    """The samples as a Markdown table (what TensorBoard's text panel renders): a prompt and its completion a
    row, their newlines and bars kept from breaking the table."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    rows = [f"| {cell(sample.prompt)} | {cell(sample.completion)} |" for sample in samples]
    return "\n".join(["| prompt | completion |", "|---|---|", *rows])
