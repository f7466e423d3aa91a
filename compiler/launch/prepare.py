"""The launch pipeline up to the request, for a dry run and for every point of a sweep: account defaults,
the checked plan, the run id, and the target's request for the image a build of the plan will make.

`dockyard launch` and a sweep then build (a sweep once per distinct image), translate again for the built
reference, record and run the job through `compiler.launch.runs`.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from compiler.launch import runs
from compiler.launch.plan import checked_plan, with_account_defaults
from compiler.spec import Plan
from compiler.spec.schema import Config
from compiler.targets.base import Request


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    run_id: str
    image: str
    """The reference the target will be sent for the image the build will make (`Target.image_reference`)."""
    request: Request


def prepare(
    config: Config,
    run_dir: Path,
    *,
    run_id: Callable[[Plan], str],
    planned: Callable[[Plan], str],
    out: IO[str] | None = None,
) -> Prepared:
    """`config`'s plan as `launch` runs it and its request; `run_id` names the run, `planned` is the local tag a
    build of the plan makes (`compiler.images.build.planned_reference`, which a sweep caches)."""
    plan = checked_plan(with_account_defaults(config, out))
    name = run_id(plan)
    image = runs.dry_run_image(plan, planned(plan))
    return Prepared(plan, name, image, runs.translate(plan, image, name, run_dir))
