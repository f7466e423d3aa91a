"""The base model's scores beside a fine-tune's. Every `dockyard eval` that ends with scores keeps them under
`$DOCKYARD_HOME/cache/eval/`, in a file named by the evaluated model's digest (the sha256 of its files) and the
settings a score depends on (the tasks, their folder's files, limit, few-shot examples, seed, batch size, the
harness's version). Evaluating a run's export (`<run>/model`) of a run that started from a checkpoint
(`model=hf model.path=BASE`, read from the run's `plan.json`) looks BASE up under the same settings: evaluate
the base once (`dockyard eval model=hf model.path=BASE ...`) and every fine-tune of it shows the base's values.
An adapter evaluated on its base (`eval.adapter`) is kept under its own digest too, and shows its base's values.

Only local folders are digested: a model named by an `s3://` prefix or a Hub id has no base column.
"""

import dataclasses
import hashlib
import json
from pathlib import Path

from compiler.core.home import cache, write_whole
from compiler.images.digests import file_sha256
from compiler.launch.evaluation import EXPORT
from compiler.launch.plan import PLAN_FILE
from compiler.spec import Plan, files
from compiler.spec.contract import EVAL_METRIC_PREFIX
from compiler.spec.schema import EvalConfig

CACHE = "eval"


def settings_key(model: Path, evaluation: EvalConfig) -> str | None:
    """The cache's name for the scores of `model` under `evaluation`'s settings; None for no local folder."""
    if not model.is_dir():
        return None
    tasks = Path(evaluation.include_path) if evaluation.include_path else None
    settings = {
        "model": folder_digest(model),
        "tasks": sorted(evaluation.tasks),
        "task_files": folder_digest(tasks) if tasks is not None and tasks.is_dir() else None,
        "limit": evaluation.limit,
        "num_fewshot": evaluation.num_fewshot,
        "seed": evaluation.seed,
        "batch_size": evaluation.batch_size,
        "lm_eval": evaluation.lm_eval,
    }
    if evaluation.adapter:  # a model of its own; a plain model's key stays what it was before adapters
        settings["adapter"] = folder_digest(Path(evaluation.adapter))
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def folder_digest(folder: Path) -> str:
    """The sha256 of a folder's files, by their paths inside it and their own digests (large ones cached)."""
    digest = hashlib.sha256()
    for path in sorted(path for path in folder.rglob("*") if path.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def keep(plan: Plan, rows: list[tuple[str, str, float, float | None]]) -> None:
    """Remember the scores (task, metric, value, stderr) of the plan's model under its evaluation's settings."""
    key = None if plan.eval is None or not rows else settings_key(Path(plan.model.path or ""), plan.eval)
    if key is not None:
        scores = {f"{EVAL_METRIC_PREFIX}{task}/{metric}": value for task, metric, value, _ in rows}
        record = {"model": plan.model.path, "scores": scores}
        write_whole(cache(CACHE) / f"{key}.json", json.dumps(record, indent=1).encode())


def base_of(model: Path) -> Path | None:
    """The checkpoint the run that exported `model` started from: its plan's `model.path`, a local folder. The
    plan's JSON is read, not typed, so a run planned under another schema version still names its base."""
    trained = model.parent / PLAN_FILE
    if model.name != EXPORT or not trained.is_file():
        return None
    section = files.read_json_object(trained, "model.path").get("model")
    base = section.get("path") if isinstance(section, dict) and section.get("family") == "hf" else None
    return Path(base) if isinstance(base, str) and base and Path(base).is_dir() else None


def base_scores(plan: Plan) -> dict[str, float]:
    """The scores kept for the base of the plan's model under the same settings (empty when none are): of an
    adapter (`eval.adapter`), its base's own, evaluated alone."""
    if plan.eval is not None and plan.eval.adapter:
        key = settings_key(Path(plan.model.path), dataclasses.replace(plan.eval, adapter=""))
    else:
        base = base_of(Path(plan.model.path or ""))
        key = None if base is None or plan.eval is None else settings_key(base, plan.eval)
    kept = None if key is None else cache(CACHE) / f"{key}.json"
    if kept is None or not kept.is_file():
        return {}
    return json.loads(kept.read_text())["scores"]
