"""The rules of `eval` (`dockyard eval`, and `trainer.eval_tasks`): a Hugging Face model folder to evaluate,
tasks the harness knows, and a task folder whose YAML files parse and whose data files are there, all checked
before anything is built.

A task is known when a YAML file of `eval.include_path` names it (`task:`, `group:` or `tag:`), or when it is one of
the harness's own and lm-eval is installed where the plan is made (its task folder is read, not imported).
"""

import importlib.util
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from compiler.core import grammar
from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, files, schema
from compiler.spec.errors import ConfigError, UnknownNameError
from compiler.spec.files import FileError
from compiler.spec.records import Layout

TASK_FILES = ("*.yaml", "*.yml")
HARNESS = "lm_eval"
NAMING_KEYS = ("task", "group", "tag")
"""The keys of a task YAML that name what `--tasks` may list."""


def check_eval(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    """`eval.tasks` (`dockyard eval`) or `trainer.eval_tasks` (a training run scoring its model as it goes):
    the same model, options and task checks, each error naming the key the tasks came from."""
    evaluation, model, trainer = config.eval, config.model, config.trainer
    evaluating = config.job is schema.Job.evaluate
    if evaluating and not evaluation.tasks:
        raise ConfigError("eval.tasks", "is empty", "name the tasks to run, e.g. eval.tasks=[hellaswag]")
    if evaluation.tasks and not evaluating:
        raise ConfigError("eval.tasks", "evaluate a model under `dockyard eval`", "leave eval.tasks out of a launch")
    key, tasks = ("eval.tasks", evaluation.tasks) if evaluation.tasks else ("trainer.eval_tasks", trainer.eval_tasks)
    if trainer.eval_tasks_interval < 0:
        raise ConfigError("trainer.eval_tasks_interval", f"is {trainer.eval_tasks_interval}", "give 0 or more steps")
    if not tasks:
        return
    if model.family != "hf":
        raise ConfigError(
            "model.path" if evaluation.tasks else "model",
            "an evaluation reads a Hugging Face model folder",
            "give a run (dockyard eval RUN) whose model/ was exported, or model=hf model.path=FOLDER",
        )
    if model.lora.rank:
        raise ConfigError("model.lora.rank", f"{key} evaluates a whole model", "set model.lora.rank=0")
    grammar.check_release("eval.lm_eval", evaluation.lm_eval)
    if evaluation.batch_size < 1:
        raise ConfigError("eval.batch_size", f"is {evaluation.batch_size}", "give 1 or more")
    if evaluation.limit is not None and (evaluation.limit <= 0 or (evaluation.limit >= 1 and evaluation.limit % 1)):
        raise ConfigError("eval.limit", f"is {evaluation.limit}", "give a whole number of documents or a fraction < 1")
    if evaluation.num_fewshot is not None and evaluation.num_fewshot < 0:
        raise ConfigError("eval.num_fewshot", f"is {evaluation.num_fewshot}", "give 0 or more")
    own = task_names(Path(evaluation.include_path)) if evaluation.include_path else set()
    if all(name in own for name in tasks):
        return  # the harness's own task list (thousands of YAML files read) is not needed
    harness = harness_task_names()
    unchecked = [name for name in tasks if name not in own and (harness is None or name not in harness)]
    if unchecked and harness is not None:
        raise UnknownNameError(key, "task", unchecked[0], own | harness)
    if unchecked:
        yield (
            f"{key}: {', '.join(unchecked)} not in eval.include_path and not checked (lm-eval is not "
            "installed here): the job fails if the harness does not know them"
        )


def task_names(folder: Path) -> set[str]:
    """The tasks and groups the YAML files under `folder` define, each file parsed and its data files found."""
    if not folder.is_dir():
        raise ConfigError("eval.include_path", f"'{folder}' is not a folder", "give the folder of your task YAMLs")
    names: set[str] = set()
    for path in task_files(folder):
        task = _task_yaml(path)
        for key in NAMING_KEYS:
            value = task.get(key)
            names.update([value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)])
        for data_file in _data_files(task, path):
            if not (folder / data_file).is_file():
                raise FileError(
                    "eval.include_path",
                    folder / data_file,
                    f"(a data file of {path.name}) does not exist",
                    "give data_files as paths relative to eval.include_path",
                )
    return names


def task_files(folder: Path) -> list[Path]:
    return sorted({path for pattern in TASK_FILES for path in folder.rglob(pattern) if path.is_file()})


class _TaskLoader(yaml.SafeLoader):
    """YAML as the harness reads a task: its tags (`!function utils.process_docs`) are kept as text."""


_TaskLoader.add_multi_constructor("!", lambda loader, suffix, node: str(node.value))


def _task_yaml(path: Path) -> dict[str, Any]:
    text = files.read_text(path, "eval.include_path")
    try:
        task = yaml.load(text, Loader=_TaskLoader)  # noqa: S506 (a SafeLoader that keeps tags as text)
    except yaml.YAMLError as error:
        problem = str(error).replace("\n", " ")
        raise FileError("eval.include_path", path, f"is not YAML the harness reads ({problem})") from None
    if not isinstance(task, dict):
        raise FileError("eval.include_path", path, "is not a task (a YAML map with task: NAME)")
    return task


def _data_files(task: dict[str, Any], path: Path) -> list[str]:
    """The local files a task's `dataset_kwargs.data_files` names (a path, a list, or a split → paths map)."""
    kwargs = task.get("dataset_kwargs") or {}
    named = kwargs.get("data_files") if isinstance(kwargs, dict) else None
    values = list(named.values()) if isinstance(named, dict) else [named]
    found = [item for value in values for item in (value if isinstance(value, list) else [value])]
    if not all(isinstance(item, str) for item in found if item is not None):
        raise FileError("eval.include_path", path, "has data_files that are not paths")
    if any(Path(item).is_absolute() for item in found if item):
        raise FileError(
            "eval.include_path",
            path,
            "names a data file by an absolute path, which the job lacks",
            "give data_files as paths relative to eval.include_path",
        )
    return [item for item in found if item and "://" not in item]


@cache
def harness_task_names() -> frozenset[str] | None:
    """The names of the harness's own tasks when lm-eval is installed here, read from its task YAMLs' `task:`
    lines (importing it would take seconds); None where it is not installed."""
    spec = importlib.util.find_spec(HARNESS)
    if spec is None or not spec.submodule_search_locations:
        return None
    names = set()
    for folder in spec.submodule_search_locations:
        for path in task_files(Path(folder) / "tasks"):
            for line in path.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key in NAMING_KEYS and value.strip() and not value.strip().startswith(("!", "[")):
                    names.add(value.strip().strip("'\""))
    return frozenset(names)
