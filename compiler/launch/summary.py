"""What a sweep leaves in its folder: one run record (`run.json`, `compiler.targets.records`) per point,
and from them the summary table (summary.md, summary.csv) and a plot of every point's loss curve (loss.png).

Besides the final numbers, each row compares the points on equal terms (an A/B such as
`experiment=compiler-ab-cpu`): the time to reach the loss every completed point reached (its worst final
loss), counted from the start of training so a compiling point pays its compile time there; the compile
time itself (the first step's time beyond a steady step's, `step_s` in the metrics); and peak memory.

Records are written as each point moves on, so the summary can be rebuilt at any time from the folder
alone: `dockyard status SWEEP_DIR` refreshes the points still running on a remote target and rewrites it.
"""

import csv
import statistics
from pathlib import Path

from compiler.launch.plot import LOSS_PLOT, plot_losses
from compiler.launch.runs import loss_curve
from compiler.launch.runs import refresh as refresh_run
from compiler.targets.records import RunRecord, load_all

SUMMARY_MD, SUMMARY_CSV = "summary.md", "summary.csv"
COLUMNS = (
    "job",
    "overrides",
    "status",
    "final_loss",
    "val_loss",
    "val_reward_accuracy",
    "tokens_per_s",
    "time_to_loss_s",
    "compile_s",
    "memory_gib",
    "wall_s",
    "billable_s",
    "spot_saving",
    "cost_usd",
)


def row(
    record: RunRecord,
    common: frozenset[str] = frozenset(),
    curve: list[dict] | None = None,
    target_loss: float | None = None,
) -> dict[str, str]:
    """A point's row in the summary; overrides every point shares (`common`) are left out. `curve` is the
    point's metrics records, `target_loss` the loss every point is timed to."""

    def number(value: float | None, digits: int) -> str:
        return "" if value is None else f"{value:.{digits}f}"

    curve = curve or []
    memory = [m["memory_gib"] for m in curve if m.get("memory_gib") is not None]
    return {
        "job": str(record.num),
        "overrides": varied_overrides(record, common),
        "status": record.status,
        "final_loss": number(record.final.get("loss"), 4),
        "val_loss": number(record.final.get("val_loss"), 4),
        "val_reward_accuracy": number(record.final.get("val_rewards/accuracy"), 3),  # trainer.objective=dpo
        "tokens_per_s": number(record.final.get("tokens_per_s"), 1),
        "time_to_loss_s": number(time_to_loss(curve, target_loss), 1),
        "compile_s": number(compile_seconds(curve), 1),
        "memory_gib": number(max(memory) if memory else None, 3),
        "wall_s": number(record.wall_s, 1),
        "billable_s": number(record.billable_s, 0),
        "spot_saving": "" if record.spot_saving is None else f"{record.spot_saving:.0%}",
        "cost_usd": number(record.cost_usd, 2),
    }


def varied_overrides(record: RunRecord, common: frozenset[str]) -> str:
    return " ".join(o for o in record.overrides if o not in common)


def compile_seconds(curve: list[dict]) -> float | None:
    """The first step's seconds beyond the median later step's: what compiling (and warming up) cost.
    None unless the curve starts at step 1 and has later records with `step_s`."""
    timed = [m for m in curve if m.get("step_s") is not None]
    if len(timed) < 2 or timed[0]["step"] != 1:
        return None
    return max(timed[0]["step_s"] - statistics.median(m["step_s"] for m in timed[1:]), 0.0)


def time_to_loss(curve: list[dict], target: float | None) -> float | None:
    """Seconds of training (`elapsed_s`) until the first record at or below `target`."""
    if target is None:
        return None
    timed = [m for m in curve if m.get("loss") is not None and m.get("elapsed_s") is not None]  # not task scores
    return next((m["elapsed_s"] for m in timed if m["loss"] <= target), None)


def common_loss(records: list[RunRecord]) -> float | None:
    """The loss every completed point reached: the highest of their final losses."""
    finals = [r.final["loss"] for r in records if r.status == "completed" and r.final.get("loss") is not None]
    return max(finals) if finals else None


SORTABLE = tuple(column for column in COLUMNS if column not in ("job", "overrides", "status", "spot_saving"))
"""The numeric columns a summary's rows can be sorted by (lowest first, points without a value last)."""


def sorted_rows(rows: list[dict[str, str]], column: str | None) -> list[dict[str, str]]:
    if column is None:
        return rows
    return sorted(rows, key=lambda row: (row[column] == "", float(row[column] or 0)))


def write(sweep_dir: Path, sort_by: str | None = None) -> list[RunRecord]:
    """Rewrite summary.md, summary.csv and loss.png from the point records, the table sorted by `sort_by`
    (one of `SORTABLE`; in job order without); returns the records."""
    records = [record for record in load_all(sweep_dir) if record.num is not None]
    curves = [(record, loss_curve(Path(record.run_dir))) for record in records]
    common, target = shared_overrides(records), common_loss(records)
    with (sweep_dir / SUMMARY_CSV).open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(row(record, frozenset(), curve, target) for record, curve in curves)
    rows = sorted_rows([row(record, common, curve, target) for record, curve in curves], sort_by)
    (sweep_dir / SUMMARY_MD).write_text(markdown(sweep_dir, rows, common, target) + total_line(records))
    curves = [(record, curve) for record, curve in curves if curve]
    if curves:
        plot(curves, common, sweep_dir / LOSS_PLOT)
    return records


def total_line(records: list[RunRecord]) -> str:
    """The whole sweep: its points' cost summed (billed, measured or predicted seconds × price, as each row's
    cost_usd) and their wall time; empty when no point has either."""
    costs = [record.cost_usd for record in records if record.cost_usd is not None]
    walls = [record.wall_s for record in records if record.wall_s is not None]
    if not (costs or walls):
        return ""
    parts = [f"${sum(costs):,.2f} for {len(costs)} points"] if costs else []
    parts += [f"{sum(walls):,.1f} s of wall time over {len(walls)} points"] if walls else []
    return f"\nTotal: {', '.join(parts)}.\n"


def refresh(sweep_dir: Path, sort_by: str | None = None) -> list[RunRecord]:
    """`dockyard status SWEEP_DIR [--sort COLUMN]`: ask the target about every point still open, then rewrite
    the summary."""
    for record in load_all(sweep_dir):
        refresh_run(record)
    return write(sweep_dir, sort_by)


def shared_overrides(records: list[RunRecord]) -> frozenset[str]:
    """The overrides every point has: said once above the table, not in every row (kept in the CSV)."""
    if len(records) < 2:
        return frozenset()
    return frozenset.intersection(*(frozenset(record.overrides) for record in records))


def markdown(sweep_dir: Path, rows: list[dict[str, str]], common: frozenset[str], target: float | None = None) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    lines = [f"# Sweep {sweep_dir.name}", "", f"{len(rows)} points: {states}", ""]
    if common:
        lines += [f"Every point: `{' '.join(sorted(common))}`", ""]
    if target is not None:
        lines += [f"time_to_loss_s: seconds of training to loss {target:.4f}, the worst final loss", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 3 + "---:|" * (len(COLUMNS) - 3)]
    lines += ["| " + " | ".join(row[c].replace("|", "\\|") for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot(curves: list[tuple[RunRecord, list[dict]]], common: frozenset[str], path: Path) -> None:
    """Every point's loss curve, labelled by its number and its own overrides."""
    labelled = [(f"#{record.num} {varied_overrides(record, common)}", curve) for record, curve in curves]
    plot_losses(labelled, f"loss, {len(curves)} points", path)
