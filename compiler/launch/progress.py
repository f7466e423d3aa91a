"""Where a run stands, from its record and the metrics its first rank wrote: what `dockyard status` and
`dockyard runs` show, in one place so the two agree (and `-o json` prints the same fields).

Pure: the caller passes the metrics rows and the clock, so the arithmetic has fast tests.
"""

from dataclasses import asdict, dataclass

from compiler.targets.base import RUNNING
from compiler.targets.records import RunRecord


@dataclass(frozen=True, kw_only=True)
class Progress:
    run_id: str
    target: str
    status: str
    run_dir: str
    started: float | None
    elapsed_s: float | None
    """Since the job started: to its end, or to now while it is open."""
    step: int | None
    steps: int | None
    loss: float | None
    val_loss: float | None
    tokens_per_s: float | None
    eta_s: float | None
    """Time left at the pace of the steps so far (running runs only)."""
    cost_usd: float | None
    """So far: billed seconds where the platform reports them, else the elapsed time, at the plan's price."""
    predicted_cost_usd: float | None
    """The whole run at the planner's predicted step time."""

    def to_json(self) -> dict:
        return asdict(self)


def progress(record: RunRecord, rows: list[dict], now: float) -> Progress:
    """`rows`: the run's metrics lines, oldest first (none where they are not on this machine; then the
    final metrics the platform reported stand in for the last row)."""
    last = {**record.final, **_latest_values(rows)}
    elapsed = None
    if record.started is not None:
        elapsed = (record.ended if record.ended is not None else now) - record.started
    step = int(last["step"]) if "step" in last else None
    price = record.price_per_hour or None
    seconds = record.billable_s if record.billable_s is not None else elapsed
    return Progress(
        run_id=record.run_id,
        target=record.target,
        status=record.status,
        run_dir=record.run_dir,
        started=record.started,
        elapsed_s=elapsed,
        step=step,
        steps=record.steps,
        loss=last.get("loss"),
        val_loss=last.get("val_loss"),
        tokens_per_s=last.get("tokens_per_s"),
        eta_s=_eta(record, step, last.get("elapsed_s")),
        cost_usd=None if price is None or seconds is None else price * seconds / 3600,
        predicted_cost_usd=None if price is None or record.predicted_s is None else price * record.predicted_s / 3600,
    )


def _latest_values(rows: list[dict]) -> dict:
    """Each metric's latest value: evaluation rows (`val_loss`) and training rows may alternate."""
    latest: dict = {}
    for row in rows:
        latest.update(row)
    return latest


def _eta(record: RunRecord, step: int | None, trained_s: float | None) -> float | None:
    if record.status != RUNNING or not step or not record.steps or trained_s is None or step >= record.steps:
        return None
    return (record.steps - step) * trained_s / step
