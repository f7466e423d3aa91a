"""The one way from a typed `Config` to a checked `Plan`: the target is resolved here, once, and the planner
gets its capabilities and its own rules (`Target.check`) as arguments, so no caller can leave them out.

`plan` compiles the config as written; `launch`, its dry run and every sweep point first fill the keys the
caller's account decides (`with_account_defaults`).
"""

import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from compiler.core.capabilities import TargetCapabilities
from compiler.launch.dataset import with_dataset_tokens
from compiler.planner.compile import compile_plan
from compiler.planner.schedule_rules import steps_for_epochs
from compiler.spec import Plan
from compiler.spec.schema import Config
from compiler.targets import registry

PLAN_FILE, REPORT_FILE = "plan.json", "report.md"


def checked_plan(config: Config, chat_date: str | None = None) -> Plan:
    """`config` compiled by the planner and checked by its target's own rules. `trainer.epochs` needs the
    data's token count, which the first plan finds (`with_dataset_tokens`); the steps it makes are planned
    again, so every rule sees the run's real length. A chat plan is dated `chat_date` (a resumed run's first
    attempt's), else today (UTC)."""
    target = registry.get(config.target.kind.value)
    targets = TargetCapabilities(own=target.capabilities, registered=registry.capabilities())
    plan = with_dataset_tokens(_dated(compile_plan(config, targets, target.check), chat_date))
    if config.trainer.epochs is None:
        return plan
    count = plan.dataset.tokens if plan.dataset else None
    steps = steps_for_epochs(config.trainer.epochs, count, plan.batch.tokens_per_step)
    resolved = compile_plan(with_values(config, {"trainer.steps": steps}), targets, target.check)
    # the count does not depend on the steps
    return dataclasses.replace(resolved, dataset=plan.dataset, chat_date=plan.chat_date)


def _dated(plan: Plan, chat_date: str | None) -> Plan:
    if not plan.data.format.rendered:
        return plan
    return dataclasses.replace(plan, chat_date=chat_date or datetime.now(UTC).date().isoformat())


def with_account_defaults(config: Config, out: IO[str] | None = None) -> Config:
    """`config` with the values the caller's account gives the keys it leaves unset (each said on `out`,
    standard error by default)."""
    values = registry.get(config.target.kind.value).account_defaults(config)
    for key, value in values.items():
        print(f"dockyard: {key} defaults to {value} (the caller's account)", file=out or sys.stderr)
    return with_values(config, values)


def with_values(config, values: dict[str, object]):
    """A copy of the typed `config` with dotted keys set (`image.registry`)."""
    for key, value in values.items():
        head, _, rest = key.partition(".")
        inner = with_values(getattr(config, head), {rest: value}) if rest else value
        config = dataclasses.replace(config, **{head: inner})
    return config


def write_plan(plan: Plan, folder: Path) -> Path:
    """`plan.json` in a run folder: what the image reads and what `dockyard status` shows."""
    path = folder / PLAN_FILE
    path.write_text(plan.to_json(indent=2) + "\n")
    return path
