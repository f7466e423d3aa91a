"""`dockyard launch --resume RUN [overrides]`: a completed, failed or stopped run goes on from its newest
checkpoint as a new attempt of the same run.

The attempt composes the run's own overrides (its `.hydra/overrides.yaml`) followed by the new ones, writes
into the run's folder (the previous attempt's plan and record kept under `attempts/<n>/`), keeps the run id
(its job is `<run id>-resume<n>`, as a platform never reuses a job's name) and counts `resumed` in the record.
What the checkpoint cannot become is refused before anything is built or launched: another model, another
engine, a ZeRO checkpoint at another data-parallel degree, other pipeline stages. DCP checkpoints (DDP, FSDP)
are resharded on load, so the node count and the data-parallel degree may change.
"""

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # (no stubs installed; its error type only)
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from compiler.spec import Plan, PlanError, files
from compiler.spec.errors import ConfigError
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts
from compiler.targets import records, registry
from compiler.targets.records import OPEN_STATUSES, RunRecord

ATTEMPTS = "attempts"
"""The run folder's record of earlier attempts: `attempts/<n>/plan.json` and `run.json`."""


@dataclass(frozen=True)
class Resume:
    record: RunRecord
    plan: Plan
    """The previous attempt's plan."""
    overrides: list[str]
    """The run's own overrides: the new ones go after them."""
    checkpoints: list[str]
    """The target's overrides that point the attempt at the run's checkpoints."""

    @property
    def attempt(self) -> int:
        return self.record.resumed + 2

    @property
    def job_id(self) -> str:
        return f"{self.record.run_id}-resume{self.attempt - 1}"


def prepare_resume(record: RunRecord) -> Resume:
    """The run to resume, or a ConfigError naming why it cannot be."""
    run_dir = Path(record.run_dir)
    if record.status in OPEN_STATUSES:
        raise ConfigError("--resume", f"run {record.run_id} is still {record.status}", f"dockyard stop {record.run_id}")
    checkpoints = registry.get(record.target).resume_checkpoints(record.run_id, run_dir)
    plan_file = run_dir / "plan.json"
    try:
        plan = Plan.from_json(files.read_text(plan_file, "--resume"))
    except PlanError as error:
        raise files.FileError(
            "--resume", plan_file, f"is not a plan ({error})", "give a run dockyard launched"
        ) from None
    return Resume(record, plan, run_overrides(run_dir, "--resume"), checkpoints)


def run_overrides(run_dir: Path, key: str) -> list[str]:
    """The overrides a run was launched with (its `.hydra/overrides.yaml`); `key` names the argument that gave
    the run in an error."""
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    try:
        overrides = OmegaConf.to_container(OmegaConf.create(files.read_text(overrides_file, key)))
    except (OmegaConfBaseException, yaml.YAMLError):
        overrides = None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise files.FileError(
            key, overrides_file, "is not the list of overrides Hydra writes", "give a run dockyard launched"
        )
    return overrides


def resume_overrides(resume: Resume) -> list[str]:
    """What else the attempt needs: the run's folder and its checkpoints."""
    return [f"hydra.run.dir={resume.record.run_dir}", *resume.checkpoints]


def check_reshard(previous: Plan, plan: Plan) -> None:
    """Refuse, in one line, a new plan whose model or layout the previous attempt's checkpoint cannot load."""
    if previous.to_dict()["model"] != plan.to_dict()["model"]:
        changed = sorted(k for k, v in plan.to_dict()["model"].items() if previous.to_dict()["model"].get(k) != v)
        raise ConfigError(
            f"model.{changed[0]}",
            "differs from the run being resumed: its checkpoint holds another model",
            "resume with the run's model (change steps, lr, nodes or dp only)",
        )
    before, after = facts(previous.parallelism.strategy), facts(plan.parallelism.strategy)
    if (before.engine == DEEPSPEED_ENGINE) != (after.engine == DEEPSPEED_ENGINE):
        raise ConfigError(
            "parallelism.strategy",
            f"{plan.parallelism.strategy.value} cannot load the {previous.parallelism.strategy.value} run's "
            "checkpoint (DeepSpeed's files against torch.distributed.checkpoint's)",
            f"resume with parallelism={previous.parallelism.strategy.value}",
        )
    if after.engine == DEEPSPEED_ENGINE and plan.layout.world_size != previous.layout.world_size:
        raise ConfigError(
            "hardware.nodes",
            f"a DeepSpeed ZeRO checkpoint of {previous.layout.world_size} ranks cannot be loaded by "
            f"{plan.layout.world_size}",
            "resume at the run's node count and processes per node",
        )
    if (plan.layout.pp, plan.layout.tp) != (previous.layout.pp, previous.layout.tp):
        raise ConfigError(
            "parallelism.pp" if plan.layout.pp != previous.layout.pp else "parallelism.tp",
            f"tp {plan.layout.tp} × pp {plan.layout.pp} differs from the run's tp {previous.layout.tp} × "
            f"pp {previous.layout.pp}: only the data-parallel degree is resharded on resume",
            "resume with the run's tp and pp",
        )


def keep_attempt(resume: Resume) -> None:
    """The previous attempt's plan and record, under `attempts/<n>/`, before the new attempt replaces them."""
    run_dir = Path(resume.record.run_dir)
    folder = run_dir / ATTEMPTS / str(resume.attempt - 1)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("plan.json", records.RECORD_FILE):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, folder / name)


def resumed_record(resume: Resume, new: RunRecord) -> RunRecord:
    """The new attempt's record: the run's id, one more resume."""
    return replace(new, run_id=resume.record.run_id, resumed=resume.record.resumed + 1)
