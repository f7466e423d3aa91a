"""How the run verbs write a run's progress for people: short durations, money, and the runs table."""

from typing import IO

from compiler.core.terminal import coloured
from compiler.launch.progress import NONE, Progress, duration
from compiler.spec.errors import printable
from compiler.targets.base import COMPLETED, FAILED


def dollars(amount: float | None) -> str:
    return NONE if amount is None else f"${amount:,.2f}"


def steps(row: Progress) -> str:
    if row.step is None:
        return NONE if row.steps is None else f"0/{row.steps}"
    return f"{row.step}/{row.steps}" if row.steps else str(row.step)


def number(value: float | None, digits: int = 4) -> str:
    return NONE if value is None else f"{value:.{digits}g}"


def status_lines(row: Progress) -> list[tuple[str, str]]:
    """`dockyard status`'s progress lines, each a label and its text."""
    lines = []
    training = [f"step {steps(row)}"]
    training += [f"loss {number(row.loss)}"] if row.loss is not None else []
    training += [f"val_loss {number(row.val_loss)}"] if row.val_loss is not None else []
    training += [f"{row.tokens_per_s:,.0f} tokens/s"] if row.tokens_per_s is not None else []
    lines.append(("progress", ", ".join(training)))
    timing = f"ran {duration(row.elapsed_s)}" if row.elapsed_s is not None else "not started"
    if row.eta_s is not None:
        timing += f", eta {duration(row.eta_s)}"
    lines.append(("time", timing))
    for slow in row.stragglers:
        where = f"node {slow['node']} ({slow['host']}) rank {slow['rank']}"
        lines.append(("straggler", f"{where}, {slow['ratio']}× the median"))
    if row.cost_usd is not None or row.predicted_cost_usd is not None:
        lines.append(("cost", f"{dollars(row.cost_usd)} so far, {dollars(row.predicted_cost_usd)} predicted in all"))
    return lines


COLUMNS = ("RUN", "TARGET", "STATUS", "AGE", "DURATION", "STEP", "LOSS", "COST")


STATUS_COLOURS = {COMPLETED: "green", FAILED: "red"}


def runs_table(rows: list[Progress], now: float, out: IO[str]) -> str:
    """`dockyard runs`: one line a run, columns as wide as their widest cell; on a terminal that takes
    colour, a completed run's status green and a failed one's red."""
    cells = [COLUMNS] + [
        (
            row.run_id,
            row.target,
            row.status,
            NONE if row.started is None else duration(now - row.started),
            duration(row.elapsed_s),
            steps(row),
            number(row.loss),
            dollars(row.cost_usd),
        )
        for row in rows
    ]
    cells = [tuple(printable(text) for text in line) for line in cells]  # a run id from a record is a file's
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    status = COLUMNS.index("STATUS")

    def cell(text: str, column: int) -> str:
        padded = text.ljust(widths[column])
        colour = STATUS_COLOURS.get(text) if column == status else None
        return coloured(padded, colour, out) if colour else padded

    return "".join("  ".join(cell(c, i) for i, c in enumerate(line)).rstrip() + "\n" for line in cells)
