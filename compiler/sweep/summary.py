"""What a sweep leaves in its folder: one run record (`run.json`, `compiler.targets.records`) per point,
and from them the summary table (summary.md, summary.csv) and a plot of every point's loss curve (loss.png).

Records are written as each point moves on, so the summary can be rebuilt at any time from the folder
alone: `dockyard status SWEEP_DIR` refreshes the points still running on a remote target and rewrites it.
"""

import csv
from pathlib import Path

from compiler.targets.records import RunRecord, load_all
from compiler.targets.runs import loss_curve

SUMMARY_MD, SUMMARY_CSV, LOSS_PLOT = "summary.md", "summary.csv", "loss.png"
COLUMNS = (
    "job",
    "overrides",
    "status",
    "final_loss",
    "tokens_per_s",
    "wall_s",
    "billable_s",
    "spot_saving",
    "cost_usd",
)


def row(record: RunRecord, common: frozenset[str] = frozenset()) -> dict[str, str]:
    """A point's row in the summary; overrides every point shares (`common`) are left out."""

    def number(value: float | None, digits: int) -> str:
        return "" if value is None else f"{value:.{digits}f}"

    return {
        "job": str(record.num),
        "overrides": " ".join(o for o in record.overrides if o not in common),
        "status": record.status,
        "final_loss": number(record.final.get("loss"), 4),
        "tokens_per_s": number(record.final.get("tokens_per_s"), 1),
        "wall_s": number(record.wall_s, 1),
        "billable_s": number(record.billable_s, 0),
        "spot_saving": "" if record.spot_saving is None else f"{record.spot_saving:.0%}",
        "cost_usd": number(record.cost_usd, 2),
    }


def write(sweep_dir: Path) -> list[RunRecord]:
    """Rewrite summary.md, summary.csv and loss.png from the point records; returns the records."""
    records = [record for record in load_all(sweep_dir) if record.num is not None]
    with (sweep_dir / SUMMARY_CSV).open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(row(record) for record in records)
    common = shared_overrides(records)
    (sweep_dir / SUMMARY_MD).write_text(markdown(sweep_dir, [row(record, common) for record in records], common))
    curves = [(record, loss_curve(Path(record.run_dir))) for record in records]
    curves = [(record, curve) for record, curve in curves if curve]
    if curves:
        plot(curves, common, sweep_dir / LOSS_PLOT)
    return records


def shared_overrides(records: list[RunRecord]) -> frozenset[str]:
    """The overrides every point has: said once above the table, not in every row (kept in the CSV)."""
    if len(records) < 2:
        return frozenset()
    return frozenset.intersection(*(frozenset(record.overrides) for record in records))


def markdown(sweep_dir: Path, rows: list[dict[str, str]], common: frozenset[str]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    lines = [f"# Sweep {sweep_dir.name}", "", f"{len(rows)} points: {states}", ""]
    if common:
        lines += [f"Every point: `{' '.join(sorted(common))}`", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 2 + "---|" + "---:|" * 6]
    lines += ["| " + " | ".join(row[c].replace("|", "\\|") for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot(curves: list[tuple[RunRecord, list[dict]]], common: frozenset[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 5))
    for record, curve in curves:
        label = f"#{record.num} {row(record, common)['overrides']}"[:60]
        axes.plot([m["step"] for m in curve], [m["loss"] for m in curve], marker=".", label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(f"loss, {len(curves)} points")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
