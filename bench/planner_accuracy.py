"""The planner's predicted peak memory per GPU against what the built-in trainer really allocates.

    python bench/planner_accuracy.py --out bench/planner_accuracy.md                   # the GPU table
    python bench/planner_accuracy.py --device cpu --out bench/planner_accuracy_cpu.md  # no GPU needed

Each configuration compiles a plan for one node of eight GPUs and runs rank 0 of it in a subprocess: the
trainer's own engine (`entrypoint.trainer.engines.make_engine`) with PyTorch's fake process group standing in for
the other ranks, so a shard group of 8 costs one device. Collectives return at once and move nothing,
so their buffers are allocated but no time is spent communicating. A few optimizer steps on random
tokens; the peak covers all of them (the optimizer's state exists from the first update on).

- CUDA: `torch.cuda.max_memory_allocated` against the planner's tensor terms (states, activations,
  logits, communication buffers), `max_memory_reserved` against tensors + allocator margin, and the
  measured step time (median of the steps after the first) against the planner's compute time.
- CPU: the peak of live tensor storage as counted by `torch.distributed._tools.mem_tracker.MemTracker`
  (a dispatch mode that sees every allocation, the DDP buckets made in C++ included), against the tensor
  terms; there is no caching allocator to compare the margin with, and no throughput. Shapes are small
  (hidden 256, sequence 256) so that bf16 on two cores finishes in minutes.

Needs torch and this repository's Python dependencies (hydra-core, omegaconf; deepspeed for the ZeRO
rows); no Docker, no network.

The baseline is model states alone: what DeepSpeed's `estimate_zero*_model_states_mem_needs` reports,
and about what accelerate's estimate-memory reports (batch 1, no activations).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402
from compiler.spec import Plan  # noqa: E402

GPT_SMALL = ("model=tiny", "model.hidden=256", "model.ffn_hidden=1024", "model.vocab=8192")
LLAMA_SMALL = (
    *GPT_SMALL,
    "model.activation=swiglu",
    "model.norm=rmsnorm",
    "model.position=rope",
    "model.bias=false",
    "model.kv_heads=2",
    "model.ffn_hidden=704",
    "model.tied_embeddings=false",
)
CPU_CONFIGS = [
    # (label, model and layout overrides, parallelism, ranks, micro batch, activation checkpointing)
    ("gpt-small", GPT_SMALL, "ddp", 1, 4, "none"),
    ("gpt-small", GPT_SMALL, "ddp", 8, 8, "none"),
    ("gpt-small", GPT_SMALL, "ddp", 8, 8, "selective"),
    ("gpt-small", GPT_SMALL, "fsdp", 8, 8, "none"),
    ("gpt-small", GPT_SMALL, "fsdp", 8, 8, "full"),
    ("gpt-small", GPT_SMALL, "zero1", 8, 4, "none"),
    ("gpt-small", GPT_SMALL, "zero2", 8, 4, "none"),
    ("gpt-small", GPT_SMALL, "zero3", 8, 4, "none"),
    ("llama-small", LLAMA_SMALL, "ddp", 8, 4, "none"),
    ("llama-small", LLAMA_SMALL, "fsdp", 8, 8, "selective"),
    ("llama-small", LLAMA_SMALL, "fsdp-hybrid", 8, 8, "none"),
    ("llama-small", LLAMA_SMALL, "fsdp", 2, 1, "full"),
    ("llama-small tp2", (*LLAMA_SMALL, "parallelism.tp=2"), "fsdp", 8, 8, "none"),
    ("llama-small", LLAMA_SMALL, "zero3", 8, 8, "full"),
]
GPU_CONFIGS = [
    ("gpt2-124m", ("model=gpt2-124m",), "ddp", 1, 8, "none"),
    ("gpt2-124m", ("model=gpt2-124m",), "ddp", 8, 16, "none"),
    ("gpt2-350m", ("model=gpt2-350m",), "ddp", 8, 8, "selective"),
    ("gpt2-350m", ("model=gpt2-350m",), "fsdp", 8, 8, "none"),
    ("gpt2-1.5b", ("model=gpt2-1.5b",), "fsdp", 8, 4, "none"),
    ("gpt2-1.5b", ("model=gpt2-1.5b",), "fsdp", 8, 16, "full"),
    ("llama3.2-1b", ("model=llama3.2-1b",), "fsdp", 8, 2, "none"),
    ("llama3.2-1b", ("model=llama3.2-1b",), "fsdp-hybrid", 8, 2, "selective"),
    ("llama3.2-1b", ("model=llama3.2-1b",), "zero1", 8, 1, "none"),
    ("llama3.2-1b", ("model=llama3.2-1b",), "zero2", 8, 2, "none"),
    ("llama3.2-1b", ("model=llama3.2-1b",), "zero3", 8, 4, "full"),
    ("llama3-8b", ("model=llama3-8b",), "fsdp", 8, 1, "full"),
    ("llama3-8b", ("model=llama3-8b",), "fsdp", 8, 2, "full"),
    ("llama3-8b tp2", ("model=llama3-8b", "parallelism.tp=2"), "fsdp", 8, 1, "selective"),
]
STEPS = {"cpu": 2, "cuda": 6}
"""Optimizer steps per configuration: the peak needs two; step times are the median after the first."""
INTRODUCTION = {
    False: [
        "One rank of the trainer's engine per row, PyTorch's fake process group playing the other ranks;",
        "'allocated' is the peak of live tensor storage counted by PyTorch's MemTracker over 2 steps, bf16.",
        "'predicted' is the planner's tensor terms (states, activations, logits, communication buffers):",
        "CUDA context and allocator margin need a GPU and are left out. 'states only' is the error of",
        "counting model states alone, as DeepSpeed's and accelerate's estimators do. Shapes are small",
        "(hidden 256, 4 layers, vocab 8192, sequence 256) so that two CPU cores finish in minutes.",
    ],
    True: [
        "One rank of the trainer's engine per row, PyTorch's fake process group playing the other ranks,",
        "6 steps, bf16. 'predicted' is the planner's tensor terms against max_memory_allocated; 'pred.",
        "reserved' adds its allocator margin against max_memory_reserved; 'context' is what the GPU holds",
        "outside PyTorch's allocator. Step time: the planner's compute time (no communication happens",
        "under the fake group) against the median measured step.",
    ],
}
MIB = 2**20


def plan_for(extra: tuple[str, ...], strategy: str, ranks: int, micro_batch: int, checkpointing: str) -> Plan:
    overrides = [
        "name=planner-accuracy",
        f"parallelism={strategy}",
        f"parallelism.micro_batch={micro_batch}",
        "parallelism.grad_accum=1",
        "parallelism.global_batch=-1",
        "parallelism.mixed_precision=bf16",
        f"parallelism.activation_checkpointing={checkpointing}",
        "hardware=p5.48xlarge",
        "hardware.nodes=1",
        f"hardware.processes_per_node={ranks}",
        "hardware.memory_check=false",
        "image=cuda",
        "data=synthetic",
        "trainer.grad_clip=1.0",
        *extra,
    ]
    return checked_plan(compose_config(overrides))


def measure(plan: Plan, device_type: str) -> dict:
    """Rank 0 of the plan in this process: peak bytes (and step seconds on CUDA) over a few steps."""
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    from torch.nn.parallel import DistributedDataParallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from entrypoint.trainer.engines import make_engine

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.layout.world_size)
    on_cpu = device_type == "cpu"
    device = torch.device("cpu") if on_cpu else torch.device("cuda", 0)
    seconds = []
    with MemTracker() if on_cpu else contextlib.nullcontext() as tracker:
        engine = make_engine(plan, device)
        if isinstance(engine.model, DistributedDataParallel):
            engine.model.register_comm_hook(None, noop_hook)  # the fake group's all-reduce returns no tensor
        for _ in range(STEPS[device_type]):
            tokens = torch.randint(0, plan.model.vocab, (plan.batch.micro_batch, plan.model.seq_len + 1), device=device)
            start = time.perf_counter()
            engine.forward_backward([(tokens[:, :-1], tokens[:, 1:])])
            engine.step(plan.trainer.lr)
            if on_cpu:
                tracker.reset_mod_stats()
            else:
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    if on_cpu:
        return {"allocated": tracker.get_tracker_snapshot("peak")[device]["Total"]}
    free, total = torch.cuda.mem_get_info()
    return {
        "allocated": torch.cuda.max_memory_allocated(),
        "reserved": torch.cuda.max_memory_reserved(),
        "outside_allocator": total - free - torch.cuda.memory_reserved(),
        "step_seconds": statistics.median(seconds[1:]),
    }


def measure_in_subprocess(plan: Plan, device_type: str, folder: Path) -> dict:
    """A fresh process per configuration: one fake process group each, and clean CUDA peak counters."""
    path = folder / "plan.json"
    path.write_text(plan.to_json())
    command = [sys.executable, __file__, "--one", str(path), "--device", device_type]
    environment = {**os.environ, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": str(plan.layout.world_size)}
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def row(label: str, strategy: str, ranks: int, checkpointing: str, plan: Plan, measured: dict) -> dict:
    memory = plan.estimate.memory
    tensors = memory.total - memory.context - memory.margin
    states = memory.parameters + memory.gradients + memory.optimizer
    result = {
        "config": f"{label} {strategy}×{ranks} mb{plan.batch.micro_batch} {checkpointing}",
        "predicted_tensors": tensors,
        "allocated": measured["allocated"],
        "error_allocated": error(tensors, measured["allocated"]),
        "error_states_only": error(states, measured["allocated"]),
    }
    if "reserved" in measured:
        result |= {
            "predicted_reserved": tensors + memory.margin,
            "reserved": measured["reserved"],
            "error_reserved": error(tensors + memory.margin, measured["reserved"]),
            "outside_allocator": measured["outside_allocator"],
            "predicted_step": plan.estimate.throughput.compute_seconds,
            "step": measured["step_seconds"],
            "error_step": error(plan.estimate.throughput.compute_seconds, measured["step_seconds"]),
        }
    return result


def table(rows: list[dict], device: str, command: str) -> str:
    cuda = "reserved" in rows[0]
    head = ["config", "predicted MiB", "allocated MiB", "error", "states only"]
    if cuda:
        head += ["pred. reserved", "reserved MiB", "error", "context MiB", "pred. step s", "step s", "error"]
    lines = ["# Planner accuracy: predicted peak memory per GPU against the trainer's", "", *INTRODUCTION[cuda]]
    lines += ["", f"Measured on {device} with `{command}`.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["config"], f"{r['predicted_tensors'] / MIB:.0f}", f"{r['allocated'] / MIB:.0f}"]
        cells += [f"{r['error_allocated']:+.1%}", f"{r['error_states_only']:+.1%}"]
        if cuda:
            cells += [f"{r['predicted_reserved'] / MIB:.0f}", f"{r['reserved'] / MIB:.0f}"]
            cells += [f"{r['error_reserved']:+.1%}", f"{r['outside_allocator'] / MIB:.0f}"]
            cells += [f"{r['predicted_step']:.3f}", f"{r['step']:.3f}", f"{r['error_step']:+.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *summary(rows)]
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> list[str]:
    keys = [("error_allocated", "planner vs allocated"), ("error_states_only", "states only (baseline) vs allocated")]
    keys += [("error_reserved", "planner vs reserved"), ("error_step", "planner step time vs measured")]
    lines = []
    for key, name in keys:
        if key in rows[0]:
            errors = [abs(r[key]) for r in rows]
            lines.append(f"- {name}: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(Plan.from_json(args.one.read_text()), args.device)))
        return
    configs = GPU_CONFIGS if args.device == "cuda" else CPU_CONFIGS
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (MemTracker)"
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for label, extra, strategy, ranks, micro_batch, checkpointing in configs:
            plan = plan_for(extra, strategy, ranks, micro_batch, checkpointing)
            measured = measure_in_subprocess(plan, args.device, Path(folder))
            rows.append(row(label, strategy, ranks, checkpointing, plan, measured))
            print(json.dumps(rows[-1]), flush=True)
    text = table(rows, device, " ".join(["python", *sys.argv]))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
