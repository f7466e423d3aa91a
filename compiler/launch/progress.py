"""Where a run stands, from its record and the metrics its first rank wrote: what `dockyard status` and
`dockyard runs` show, in one place so the two agree (and `-o json` prints the same fields); and, on a
terminal, a job's metrics lines as progress lines while `launch` follows it.

Pure but for the writer: the caller passes the metrics rows and the clock, so the arithmetic has fast tests.
"""

import json
import re
from dataclasses import asdict, dataclass
from typing import IO, cast

from compiler.core.terminal import is_terminal
from compiler.targets.base import RUNNING
from compiler.targets.records import RunRecord

NONE = "-"


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
    stragglers: tuple[dict, ...] = ()
    """The ranks the trainer last named as stragglers (`node`, `host`, `rank`, `ratio`)."""

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
        stragglers=tuple(last.get("stragglers", ())),
    )


def duration(seconds: float | None) -> str:
    """`42 s`, `3 min 05 s`, `2 h 04 min`, `3 d 2 h`."""
    if seconds is None:
        return NONE
    whole = max(0, round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if days:
        return f"{days} d {hrs} h"
    if hours:
        return f"{hours} h {mins:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


METRICS_LINE = re.compile(r"(?P<node>.*\| )?(?P<metrics>\{.*\"step\".*\})")
"""A node's metrics line in a job's output (`algo-1 | {"step": 20, "loss": 1.83, ...}`)."""


def progress_line(metrics: dict, steps: int) -> str:
    """`step 20/60  loss 1.83  1,234 tokens/s  eta 14 s`: a metrics line as people read it."""
    step = int(metrics["step"])
    parts = [f"step {step}/{steps}"]
    parts += [f"{name} {metrics[name]:.4g}" for name in ("loss", "val_loss") if name in metrics]
    parts += [f"{metrics['tokens_per_s']:,.0f} tokens/s"] if "tokens_per_s" in metrics else []
    if "elapsed_s" in metrics and 0 < step < steps:
        parts.append(f"eta {duration((steps - step) * metrics['elapsed_s'] / step)}")
    return "  ".join(parts)


class ProgressWriter:
    """A job's output on a terminal: its metrics lines as progress lines, every other line as it is (the
    JSON lines stay in the job's log and its metrics file, which SageMaker's metric regexes and the run
    reader parse)."""

    def __init__(self, out: IO[str], steps: int) -> None:
        self.out, self.steps, self.pending = out, steps, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            self.out.write("".join(self._shown(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def _shown(self, line: str) -> str:
        match = METRICS_LINE.fullmatch(line)
        if match is None:
            return line
        try:
            return (match["node"] or "") + progress_line(json.loads(match["metrics"]), self.steps)
        except (ValueError, TypeError, KeyError):
            return line  # a line that only looks like metrics


def for_people(out: IO[str], steps: int) -> IO[str]:
    """`out` itself, or on a terminal, `out` showing metrics lines as progress lines."""
    return cast(IO[str], ProgressWriter(out, steps)) if is_terminal(out) else out  # writes as a file does


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
