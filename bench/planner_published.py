"""The planner against published GPU measurements: every row of `bench/published/rows.csv` re-planned as a user
would write it, predicted against measured tokens/s per GPU and (where the source gives it) memory per GPU.

    python bench/planner_published.py            # the table, then median and worst error
    python bench/planner_published.py --fit      # also the matmul efficiency each row implies

The baseline is the published measurement itself (ratio predicted / measured, error |ratio − 1|). A row counts
toward a figure only where dockyard expresses its settings: rows the planner cannot express (op-level
selective checkpointing, Float8 linears, a multi-node run whose network the source does not state) are listed
with the reason and left out of the median. No GPU, no network: plans only (`compiler.launch.plan`).
"""

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402
from compiler.spec import Plan  # noqa: E402

ROWS = REPO / "bench" / "published" / "rows.csv"
GIB = 2**30
GPUS_PER_NODE = 8

# The models of the published rows that dockyard has no config file for, from their own configs: llm-foundry's
# scripts/train/yamls/pretrain/mpt-*.yaml (ALiBi, written here as rope: neither has parameters, and neither
# counts in the model FLOPs) and Llama 2's config.json files.
_MPT = ("model=gpt2-1.5b", "model.vocab=50368", "model.bias=false", "model.position=rope", "model.tied_embeddings=true")
MODELS = {
    "llama3-8b": ("model=llama3-8b", "model.context=131072"),  # Llama 3.1's context
    "llama3-70b": ("model=llama3-70b", "model.context=131072"),
    "llama2-13b": ("model=llama3-8b", "model.hidden=5120", "model.layers=40", "model.heads=40", "model.kv_heads=40",
                   "model.ffn_hidden=13824", "model.vocab=32000", "model.context=4096"),
    "llama2-70b": ("model=llama3-70b", "model.ffn_hidden=28672", "model.vocab=32000", "model.context=4096"),
    **{
        f"mpt-{size}": (*_MPT, f"model.hidden={hidden}", f"model.layers={layers}", f"model.heads={heads}",
                        f"model.kv_heads={heads}", f"model.ffn_hidden={4 * hidden}", "model.context=8192")
        for size, hidden, layers, heads in [
            ("1b", 2048, 24, 16), ("3b", 2560, 32, 20), ("7b", 4096, 32, 32), ("13b", 5120, 40, 40),
            ("30b", 7168, 48, 56), ("70b", 8192, 80, 64),
        ]
    },
}  # fmt: skip


@dataclass
class Row:
    fields: dict[str, str]

    @property
    def label(self) -> str:
        f = self.fields
        extra = " compile" if f["compile"] == "True" else ""
        return (
            f"{f['model']} {f['gpu'].split()[0].upper()} ×{f['gpus']}{tensor_parallel(f)} s{f['seq_len']} "
            f"mb{f['micro_batch']} ac={f['checkpointing']}{extra}"
        )

    def not_expressed(self, what: str) -> str:
        """Why dockyard cannot state this row's settings (for `what`: speed or memory), or ''."""
        f = self.fields
        if what == "speed" and not f["tokens_per_s_per_gpu"]:
            return "no comparable tokens/s (Float8)" if "Float8" in f["note"] else "not measured"
        if what == "memory" and not f["memory_gib"]:
            return "not measured"
        if what == "memory" and "Float8" in f["note"] and f["checkpointing"] != "full":
            return "Float8 linears keep their inputs for the backward in float8 (full recomputation keeps none)"
        if f["checkpointing"] not in ("none", "full", "selective", "selective-op", "every-other-layer"):
            return f"checkpointing {f['checkpointing']}"
        if not supports_checkpointing(f["checkpointing"]):
            return f"checkpointing {f['checkpointing']} has no dockyard mode"
        if int(f["gpus"]) > GPUS_PER_NODE and not f["network_gbps"]:
            return "network not stated"
        return ""

    def overrides(self) -> list[str]:
        f = self.fields
        gpus = int(f["gpus"])
        overrides = [
            "name=published",
            *MODELS[f["model"]],
            f"model.seq_len={f['seq_len']}",
            f"parallelism={f['strategy']}",
            f"parallelism.micro_batch={f['micro_batch']}",
            f"parallelism.grad_accum={f['grad_accum']}",
            "parallelism.global_batch=-1",
            "parallelism.mixed_precision=bf16",
            f"parallelism.activation_checkpointing={checkpointing_mode(f['checkpointing'])}",
            f"hardware={f['instance_type']}",
            f"hardware.nodes={max(1, gpus // GPUS_PER_NODE)}",
            f"hardware.processes_per_node={min(gpus, GPUS_PER_NODE)}",
            "hardware.memory_check=false",
            f"trainer.compile={'model' if f['compile'] == 'True' else 'false'}",
            # the published runs compute the whole logits (torchtitan's and llm-foundry's cross-entropy, no
            # streamed loss), so their plans do too: the default one chunk's logits would undercount their peak
            "trainer.loss_chunk=0",
            "image=cuda",
            "data=synthetic",
        ]
        if f["network_gbps"]:
            overrides.append(f"hardware.network_gbps={f['network_gbps']}")
        if f.get("tp"):
            overrides.append(f"parallelism.tp={f['tp']}")
        return overrides


def tensor_parallel(fields: dict[str, str]) -> str:
    """The label's tensor-parallel degree, where a row has one (the CSV's last column, only on those rows)."""
    return f" tp{fields['tp']}" if fields.get("tp") else ""


def checkpointing_mode(published: str) -> str:
    """The dockyard mode that does what the source's checkpointing does."""
    return {"selective-op": "selective"}.get(published, published)


def supports_checkpointing(published: str) -> bool:
    from compiler.spec import schema

    return checkpointing_mode(published) in {mode.value for mode in schema.Checkpointing}


def read_rows(path: Path = ROWS) -> list[Row]:
    with path.open() as f:
        return [Row(fields) for fields in csv.DictReader(f)]


def implied_efficiency(plan: Plan, measured_tokens_per_gpu: float) -> float:
    """The matmul efficiency at which the plan's step (its exposed communication unchanged) takes as long as
    the measured one."""
    predicted = plan.estimate.throughput
    measured_step = plan.batch.tokens_per_step / (measured_tokens_per_gpu * plan.layout.world_size)
    compute = max(measured_step - predicted.exposed_communication_seconds, 1e-9)
    return predicted.matmul_efficiency * predicted.compute_seconds / compute


def _summary(name: str, errors: list[float]) -> str:
    if not errors:
        return f"{name}: no comparable rows"
    worst = max(errors, key=abs)
    return (
        f"{name}: {len(errors)} rows, median |error| {statistics.median(abs(e) for e in errors):.1%}, "
        f"worst {worst:+.1%}"
    )


@dataclass
class Comparison:
    """Predicted against measured over the rows: relative errors (predicted / measured − 1), table lines and
    the rows or measurements left out, with why."""

    speed_errors: list[float]
    memory_errors: list[float]
    lines: list[str]
    left_out: list[str]


def compare(rows: list[Row], fit: bool = False) -> Comparison:
    result = Comparison([], [], [], [])
    for row in rows:
        why_speed, why_memory = row.not_expressed("speed"), row.not_expressed("memory")
        if why_speed and why_memory:
            result.left_out.append(f"{row.label}: {why_speed}; memory: {why_memory}")
            continue
        plan = checked_plan(compose_config(row.overrides()))
        result.lines.append(_compared(row, plan, result, fit, why_speed, why_memory))
        for reason in (why_speed and f"tokens/s: {why_speed}", why_memory and f"memory: {why_memory}"):
            if reason and not reason.endswith("not measured"):
                result.left_out.append(f"{row.label}: {reason}")
    return result


def _compared(row: Row, plan: Plan, result: Comparison, fit: bool, why_speed: str, why_memory: str) -> str:
    f, predicted = row.fields, plan.estimate.throughput
    cells = [f"{row.label:58}"]
    if why_speed:
        cells.append(f"{'':>10} {'':>7} {'':>7}")
    else:
        measured = float(f["tokens_per_s_per_gpu"])
        per_gpu = predicted.tokens_per_second / plan.layout.world_size
        result.speed_errors.append(per_gpu / measured - 1)
        cells.append(f"{per_gpu:10,.0f} {measured:7,.0f} {per_gpu / measured - 1:+7.1%}")
    if why_memory:
        cells.append(f" {'':>8} {'':>6} {'':>7}")
    else:
        measured = float(f["memory_gib"])
        gib = plan.estimate.memory.total / GIB
        result.memory_errors.append(gib / measured - 1)
        cells.append(f" {gib:8.1f} {measured:6.1f} {gib / measured - 1:+7.1%}")
    efficiency = f"{predicted.matmul_efficiency:.2f}"
    if fit and not why_speed:
        efficiency += f" (implied {implied_efficiency(plan, float(f['tokens_per_s_per_gpu'])):.2f})"
    cells.append(f" {efficiency}")
    return " ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fit", action="store_true", help="print the matmul efficiency each row implies")
    args = parser.parse_args()
    result = compare(read_rows(), args.fit)
    print(f"{'row':58} {'tok/s pred':>10} {'meas':>7} {'err':>7}  {'GiB pred':>8} {'meas':>6} {'err':>7}  eff")
    print("\n".join(result.lines))
    print()
    print(_summary("tokens/s per GPU", result.speed_errors))
    print(_summary("memory per GPU (reserved peak)", result.memory_errors))
    if result.left_out:
        print("\nleft out (settings dockyard does not express):")
        print("\n".join(f"  {line}" for line in result.left_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
