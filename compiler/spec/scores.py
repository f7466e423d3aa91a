"""Task scores between lm-evaluation-harness's results JSON and a metrics line: the job writes them
(`entrypoint.evaluation`), the host reads them back into its table (`compiler.launch.evaluation`).
Standard library only."""

import math
from typing import Any, TypeGuard

from compiler.spec.contract import EVAL_METRIC_PREFIX, EVAL_STDERR_SUFFIX


def scores(results: dict[str, Any]) -> dict[str, float]:
    """The `results` section of the harness's JSON (task → `metric,filter` → value) as metrics-line keys,
    `eval/<task>/<metric>`: the numbers only (a stderr the harness could not compute is "N/A")."""
    found = {}
    for task, values in sorted(results.items()):
        for key, value in sorted(values.items()) if isinstance(values, dict) else ():
            metric, comma, kept_by = key.partition(",")
            if comma and _number(value):
                name = metric if kept_by == "none" else f"{metric}/{kept_by}"
                found[f"{EVAL_METRIC_PREFIX}{task}/{name}"] = float(value)
    return found


def score_rows(line: dict[str, Any]) -> list[tuple[str, str, float, float | None]]:
    """(task, metric, value, standard error or None) of every score in a metrics line, in its order."""
    rows = []
    for key, value in line.items():
        if not key.startswith(EVAL_METRIC_PREFIX) or not _number(value):
            continue
        task, _, metric = key.removeprefix(EVAL_METRIC_PREFIX).partition("/")
        name, _, kept_by = metric.partition("/")
        if name.endswith(EVAL_STDERR_SUFFIX):
            continue
        stderr = line.get(f"{EVAL_METRIC_PREFIX}{task}/{name}{EVAL_STDERR_SUFFIX}" + (f"/{kept_by}" if kept_by else ""))
        rows.append((task, metric, float(value), float(stderr) if _number(stderr) else None))
    return rows


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
