"""The evidence as it grows: one JSON document, and the markdown tables made from it, both rewritten whole
(a temporary file, then a rename) after every job."""

import json
import os
import statistics
from pathlib import Path

MIB = 2**20
JSON_NAME, MARKDOWN_NAME = "gpu_evidence.json", "gpu_evidence.md"
PARTS = {
    "paths": "Every CUDA path once",
    "mfu": "MFU: tokens/s, MFU (the trainer's formula), peak memory, predicted against measured step time",
    "accuracy": "Planner accuracy: predicted peak memory against the allocator's",
}


class Evidence:
    """The run's figures by part, written into `folder` whenever they change."""

    def __init__(self, folder: Path, header: dict) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.document = {**header, "parts": {name: {"status": "waiting", "rows": [], "notes": []} for name in PARTS}}
        self.write()

    def part(self, name: str) -> dict:
        return self.document["parts"][name]

    def add_row(self, part: str, row: dict) -> None:
        self.part(part)["rows"].append(row)
        self.write()

    def note(self, part: str, text: str) -> None:
        self.part(part)["notes"].append(text)
        self.write()

    def finish(self, part: str, status: str, seconds: float) -> None:
        self.part(part).update(status=status, seconds=round(seconds, 1))
        if part == "accuracy":
            self.part(part)["summary"] = accuracy_summary(self.part(part)["rows"])
        self.write()

    def write(self) -> None:
        for name, text in ((JSON_NAME, json.dumps(self.document, indent=2) + "\n"), (MARKDOWN_NAME, markdown(self))):
            temporary = self.folder / f".{name}.tmp"
            temporary.write_text(text)
            os.replace(temporary, self.folder / name)


MIB_KEYS = ("predicted_tensors", "allocated", "predicted_reserved", "reserved", "outside_allocator")
ERROR_KEYS = ("error_allocated", "error_states_only", "error_reserved", "error_step")
"""An accuracy row's byte counts and relative errors (the keys `bench/planner_accuracy.py` names)."""


def accuracy_summary(rows: list[dict]) -> dict:
    """Median and worst |error| of each measured comparison."""
    measured = [row for row in rows if "error" not in row]
    summary = {}
    for key in ERROR_KEYS:
        errors = [abs(row[key]) for row in measured if row.get(key) is not None]
        if errors:
            summary[key] = {"median": statistics.median(errors), "worst": max(errors), "count": len(errors)}
    return summary


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def number(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def paths_table(rows: list[dict]) -> list[str]:
    head = ["path", "world", "group", "result", "loss", "seconds", "error"]
    cells = [
        [
            r["path"],
            str(r.get("world", "")),
            r.get("group", ""),
            {True: "pass", False: "FAIL", None: "skipped"}[r["ok"]],
            number(r.get("loss"), ".4f"),
            number(r.get("seconds"), ".1f"),
            r.get("error", "").replace("|", "\\|")[:200],
        ]
        for r in rows
    ]
    return table(head, cells)


def mfu_table(rows: list[dict]) -> list[str]:
    head = ["model", "compile", "micro batch", "tokens/s", "MFU", "peak GiB", "pred. step s", "step s", "error"]
    cells = []
    for r in rows:
        if "error" in r:
            cells.append([r["model"], r["compile"], "", "", "", "", "", "", "FAIL: " + r["error"][:150]])
            continue
        mfu = None if r["mfu"] is None else 100 * r["mfu"]
        cells.append(
            [
                r["model"],
                r["compile"],
                str(r["micro_batch"]),
                f"{r['tokens_per_s']:,.0f}",
                number(mfu, ".1f" if mfu is None or mfu >= 0.1 else ".2g"),
                f"{r['peak_bytes'] / 2**30:.2f}",
                f"{r['predicted_step_s']:.3g}",
                f"{r['step_s']:.3g}",
                f"{r['error_step']:+.1%}",
            ]
        )
    return [*table(head, cells), "", "MFU in percent of the catalog's dense bf16 peak for this GPU."]


def accuracy_table(rows: list[dict], summary: dict) -> list[str]:
    head = ["config", "predicted MiB", "allocated MiB", "error", "pred. reserved", "reserved MiB", "error"]
    head += ["context MiB", "pred. step s", "step s", "error"]
    cells = []
    for r in rows:
        if "error" in r:
            cells.append([r["config"], *[""] * 9, "FAIL: " + r["error"][:150]])
            continue
        mib = {key: number(r[key] / MIB if r.get(key) is not None else None, ".0f") for key in MIB_KEYS}
        percent = {key: number(r.get(key), "+.1%") for key in ERROR_KEYS}
        cells.append(
            [r["config"], mib["predicted_tensors"], mib["allocated"], percent["error_allocated"]]
            + [mib["predicted_reserved"], mib["reserved"], percent["error_reserved"], mib["outside_allocator"]]
            + [number(r.get("predicted_step"), ".3f"), number(r.get("step"), ".3f"), percent["error_step"]]
        )
    names = {
        "error_allocated": "planner vs max_memory_allocated",
        "error_states_only": "model states alone (DeepSpeed's estimator) vs allocated",
        "error_reserved": "planner + allocator margin vs max_memory_reserved",
        "error_step": "planner compute time vs measured step",
    }
    lines = [f"- {names[key]}: median |error| {s['median']:.1%}, worst {s['worst']:.1%}" for key, s in summary.items()]
    return [*table(head, cells), "", *lines]


def markdown(evidence: Evidence) -> str:
    document = evidence.document
    lines = [
        "# GPU evidence",
        "",
        f"Device: {document['device']}; torch {document['torch']}; mode {document['mode']}; "
        f"started {document['started']}; budget {document['budget_s']:.0f} s; torch.compile backend "
        f"{document['compile_backend']}.",
        "",
        f"Command: `{document['command']}`",
    ]
    render = {"paths": paths_table, "mfu": mfu_table}
    for name, title in PARTS.items():
        part = document["parts"][name]
        lines += [
            "",
            f"## {title}",
            "",
            f"Status: {part['status']}" + (f", {part['seconds']} s" if "seconds" in part else ""),
        ]
        lines += ["", *(f"- {note}" for note in part["notes"])] if part["notes"] else []
        if part["rows"]:
            rows = part["rows"]
            body = accuracy_table(rows, accuracy_summary(rows)) if name == "accuracy" else render[name](rows)
            lines += ["", *body]
    return "\n".join(lines) + "\n"
