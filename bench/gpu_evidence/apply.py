"""A GPU run's figures become the project's, in one step:

    python -m bench.gpu_evidence.apply OUT      # OUT: the folder bench/gpu_evidence.sh wrote

- `bench/gpu_evidence.md` and `bench/gpu_evidence.json`: the run's tables, copied in to be committed;
- `compiler/planner/assumptions.py`: `CUDA_CONTEXT_BYTES` (the median memory the GPU holds outside PyTorch's
  allocator over the accuracy rows), `ALLOCATOR_MARGIN` (the median of max_memory_reserved over
  max_memory_allocated, less one) and `ASSUMED_MATMUL_EFFICIENCY` (the median MFU of the eager MFU rows, whose
  plans recompute nothing: the efficiency of GPUs that no published run's fit covers), each `Assumption`'s
  source then naming the run; and the measured GPU family's entry of `MATMUL_EFFICIENCY` (A100, H100, H200:
  the one the device's name contains), its level moved by the eager rows' median of measured over predicted
  MFU and its source the run, its size dependence kept;
- `README.md`: the same figures where it states them ("the CUDA context (600 MiB)", ...).

A figure without passing rows behind it is left as it was, and said so. Then review the diff, regenerate the
goldens the constants move (`pytest --update-golden`) and say in the README's prose that they are measured.
A CPU run's figures are no GPU constants: it is refused unless `--allow-cpu` (the suite's own test).
"""

import argparse
import json
import re
import shutil
import statistics
from pathlib import Path

from bench.gpu_evidence.report import JSON_NAME, MARKDOWN_NAME

REPO = Path(__file__).resolve().parents[2]
ASSUMPTIONS_FILE = Path("compiler/planner/assumptions.py")
CONSTANTS = {
    # figure → (the constant's line, how the value is written, the Assumption's name, the README's phrase)
    "cuda_context_mib": ("CUDA_CONTEXT_BYTES = ", "{:d} * 2**20", "CUDA context", r"the CUDA context \(({}) MiB\)"),
    "allocator_margin": ("ALLOCATOR_MARGIN = ", "{:.3g}", "allocator margin", r"the allocator's margin \(({})%\)"),
    "matmul_efficiency": (
        "ASSUMED_MATMUL_EFFICIENCY = ",
        "{:.3g}",
        "matmul efficiency",
        r"the matmul efficiency behind the predicted step time and MFU \(({})%\)",
    ),
}


def figures(document: dict) -> dict:
    """The constants' measured values (only those the run has passing rows for)."""
    accuracy = [row for row in document["parts"]["accuracy"]["rows"] if "error" not in row]
    eager = _eager_rows(document)
    found = {}
    contexts = [row["outside_allocator"] for row in accuracy if row.get("outside_allocator") is not None]
    if contexts:
        found["cuda_context_mib"] = round(statistics.median(contexts) / 2**20)
    margins = [row["reserved"] / row["allocated"] - 1 for row in accuracy if row.get("reserved") is not None]
    if margins:
        found["allocator_margin"] = round(statistics.median(margins), 3)
    efficiencies = [row["mfu"] for row in eager if row.get("mfu") is not None]
    if efficiencies:
        found["matmul_efficiency"] = float(f"{statistics.median(efficiencies):.3g}")
    return found


FIT_ENTRY = r'^    "{family}": EfficiencyFit\((?P<arguments>.*?)\),\n'
"""A family's entry of `MATMUL_EFFICIENCY`: its peak share, full width, width exponent, full tokens, tokens
exponent and source, on one line or several."""


def family_efficiency(document: dict, text: str) -> tuple[str, float] | None:
    """The GPU family the run measured (the `MATMUL_EFFICIENCY` key its device's name contains) and the peak
    share its eager MFU rows imply: the entry's own scaled by the median of measured over predicted MFU (the
    planner's MFU of a one-GPU step is proportional to the efficiency); None without such a family or rows."""
    families = re.findall(r'^    "([^"]+)": EfficiencyFit\(', text, re.M)
    family = next((key for key in families if key in document["device"]), None)
    entry = re.search(FIT_ENTRY.format(family=re.escape(family)), text, re.M | re.S) if family else None
    rows = [row for row in _eager_rows(document) if row.get("mfu") and row.get("predicted_mfu")]
    if family is None or entry is None or not rows:
        return None
    share = float(entry["arguments"].split(",")[0])
    return family, round(share * statistics.median(row["mfu"] / row["predicted_mfu"] for row in rows), 3)


def updated_family(text: str, family: str, share: float, source: str) -> str:
    """The family's entry with the measured peak share and the run as its source, its size dependence kept."""
    pattern = re.compile(FIT_ENTRY.format(family=re.escape(family)), re.M | re.S)
    entry = pattern.search(text)
    if entry is None:
        raise SystemExit(f"{ASSUMPTIONS_FILE}: no MATMUL_EFFICIENCY entry for {family} to update")
    size = ", ".join(part.strip() for part in entry["arguments"].split(",")[1:5])
    replacement = f'    "{family}": EfficiencyFit(\n        {share:g}, {size}, "{source}"\n    ),\n'
    return text[: entry.start()] + replacement + text[entry.end() :]


def _eager_rows(document: dict) -> list[dict]:
    return [row for row in document["parts"]["mfu"]["rows"] if row.get("ok") and row["compile"] == "false"]


def readme_value(figure: str, value: float) -> str:
    return str(value) if figure == "cuda_context_mib" else f"{value:.0%}".rstrip("%")


def updated_assumptions(text: str, found: dict, source: str) -> str:
    for figure, value in found.items():
        prefix, form, name, _ = CONSTANTS[figure]
        text, count = re.subn(rf"^{re.escape(prefix)}.*$", prefix + form.format(value), text, count=1, flags=re.M)
        if not count:
            raise SystemExit(f"{ASSUMPTIONS_FILE}: no line starting '{prefix}' to update")
        # the value: one f-string, or several literals concatenated (the matmul efficiency's is two)
        entry = rf'(Assumption\(\s*"{re.escape(name)}",\s*f"[^"]*"(?:\s*f?"[^"]*")*,)((?:\s*"[^"]*")+)(,?\s*\))'
        text = re.sub(entry, lambda m: f'{m[1]}\n        "{source}"{m[3]}', text, count=1)
    return text


def updated_readme(text: str, found: dict) -> str:
    for figure, value in found.items():
        phrase = CONSTANTS[figure][3].format(r"[\d.]+").replace(" ", r"\s+")  # the README wraps its lines
        match = re.search(phrase, text)
        if match:
            start, end = match.span(1)
            text = text[:start] + readme_value(figure, value) + text[end:]
    return text


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_evidence.apply", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the folder bench/gpu_evidence.sh wrote")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to update (default: this one)")
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = args.run / JSON_NAME
    if not path.is_file():
        parser.exit(2, f"{parser.prog}: error: no {JSON_NAME} in {args.run}; pass the folder gpu_evidence.sh wrote\n")
    document = json.loads(path.read_text())
    if document["mode"] != "cuda" and not args.allow_cpu:
        parser.exit(2, f"{parser.prog}: error: {path} is a --cpu run; its figures are no GPU constants\n")
    found = figures(document)
    source = f"measured: bench/gpu_evidence.md ({document['device']}, {document['started'][:10]})"
    assumptions = args.root / ASSUMPTIONS_FILE
    text = assumptions.read_text()
    family = family_efficiency(document, text)
    text = updated_assumptions(text, found, source)
    assumptions.write_text(updated_family(text, *family, source) if family else text)
    readme = args.root / "README.md"
    readme.write_text(updated_readme(readme.read_text(), found))
    for name in (JSON_NAME, MARKDOWN_NAME):
        shutil.copyfile(args.run / name, args.root / "bench" / name)
    for figure in CONSTANTS:
        print(f"{figure:<18} {found.get(figure, 'no passing rows: left as it was')}")
    left = "no family of MATMUL_EFFICIENCY in the device's name, or no eager rows: left as it was"
    print(f"{'family efficiency':<18} {f'{family[0]} {family[1]:g}' if family else left}")
    print("next: review the diff, `pytest --update-golden`, and say in the README's prose which figures are measured")


if __name__ == "__main__":
    main()
