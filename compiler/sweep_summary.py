"""What a sweep leaves in its folder: one `point.json` per point, and from them the summary table
(summary.md, summary.csv) and a plot of every point's loss curve (loss.png).

Records are written as each point moves on, so the summary can be rebuilt at any time from the folder
alone: `dockyard status SWEEP_DIR` refreshes the points still running on a remote target and rewrites it.
"""

import csv
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

POINT_FILE = "point.json"
SUMMARY_MD, SUMMARY_CSV, LOSS_PLOT = "summary.md", "summary.csv", "loss.png"
METRICS_FILE = "nodes/algo-1/output/data/metrics.jsonl"
"""The trainer's metrics on the local target, one JSON object per logged step."""
COLUMNS = ("job", "overrides", "status", "final_loss", "tokens_per_s", "wall_s", "cost_usd")
OPEN_STATES = ("submitted", "running")


@dataclass(frozen=True)
class PointRecord:
    num: int
    overrides: list[str]
    status: str
    """invalid, dry-run, submitted, running, completed, failed or stopped."""
    target: str = ""
    run_id: str = ""
    region: str = ""
    image: str = ""
    price_per_hour: float = 0.0
    predicted_s: float | None = None
    """The planner's predicted training time (GPU plans), the cost estimate of a point that has not run."""
    wall_s: float | None = None
    final: dict = field(default_factory=dict)
    """The last metrics the job reported (loss, tokens_per_s, ...)."""
    error: str = ""

    @property
    def cost_usd(self) -> float | None:
        seconds = self.wall_s if self.wall_s is not None else self.predicted_s
        return None if seconds is None else self.price_per_hour * seconds / 3600

    def row(self, common: frozenset[str] = frozenset()) -> dict[str, str]:
        """The summary's row; overrides every point shares (`common`) are left out."""

        def number(value: float | None, digits: int) -> str:
            return "" if value is None else f"{value:.{digits}f}"

        return {
            "job": str(self.num),
            "overrides": " ".join(o for o in self.overrides if o not in common),
            "status": self.status,
            "final_loss": number(self.final.get("loss"), 4),
            "tokens_per_s": number(self.final.get("tokens_per_s"), 1),
            "wall_s": number(self.wall_s, 1),
            "cost_usd": number(self.cost_usd, 2),
        }


def save(record: PointRecord, folder: Path) -> PointRecord:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / POINT_FILE).write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record


def update(record: PointRecord, folder: Path, **changes) -> PointRecord:
    return save(replace(record, **changes), folder)


def load_all(sweep_dir: Path) -> list[tuple[Path, PointRecord]]:
    """Every point under `sweep_dir` with its folder, in job order."""
    found = [(path.parent, PointRecord(**json.loads(path.read_text()))) for path in sweep_dir.glob(f"**/{POINT_FILE}")]
    return sorted(found, key=lambda item: item[1].num)


def final_metrics(run_dir: Path) -> dict:
    curve = loss_curve(run_dir)
    return curve[-1] if curve else {}


def loss_curve(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(sweep_dir: Path) -> list[PointRecord]:
    """Rewrite summary.md, summary.csv and loss.png from the point records; returns the records."""
    points = load_all(sweep_dir)
    records = [record for _, record in points]
    with (sweep_dir / SUMMARY_CSV).open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(record.row() for record in records)
    common = shared_overrides(records)
    (sweep_dir / SUMMARY_MD).write_text(markdown(sweep_dir, [record.row(common) for record in records], common))
    curves = [(record, loss_curve(folder)) for folder, record in points]
    curves = [(record, curve) for record, curve in curves if curve]
    if curves:
        plot(curves, common, sweep_dir / LOSS_PLOT)
    return records


def shared_overrides(records: list[PointRecord]) -> frozenset[str]:
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
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 2 + "---|" + "---:|" * 4]
    lines += ["| " + " | ".join(row[c].replace("|", "\\|") for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot(curves: list[tuple[PointRecord, list[dict]]], common: frozenset[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 5))
    for record, curve in curves:
        label = f"#{record.num} {record.row(common)['overrides']}"[:60]
        axes.plot([m["step"] for m in curve], [m["loss"] for m in curve], marker=".", label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(f"loss, {len(curves)} points")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
