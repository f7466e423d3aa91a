"""Which of the CLI's tasks a sweep runs as launches: the CLI marks them (`sweeps_as`), the sweep launcher
reads the mark (`mode_of`), and neither imports the other."""

from collections.abc import Callable
from typing import TypeVar

LAUNCH, DRY_RUN = "launch", "dry_run"
_MARK = "dockyard_launch_mode"
Task = TypeVar("Task", bound=Callable)


def sweeps_as(mode: str) -> Callable[[Task], Task]:
    """Mark a task function: under `hydra/launcher=dockyard` its points are `mode` (LAUNCH or DRY_RUN)."""

    def mark(task: Task) -> Task:
        setattr(task, _MARK, mode)
        return task

    return mark


def mode_of(task_function: Callable | None) -> str | None:
    """LAUNCH or DRY_RUN for a marked task (or the CLI's wrapper of one, which names it in `__wrapped__`),
    None for any other, which the launcher runs as Hydra's basic launcher does."""
    task = getattr(task_function, "__wrapped__", task_function)
    return getattr(task, _MARK, None)
