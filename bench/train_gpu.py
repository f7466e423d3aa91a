"""Tokens/s and MFU of the built-in trainer on one GPU node: gpt2-124m and gpt2-350m, DDP and FSDP, bf16,
with and without torch.compile.

    python bench/train_gpu.py                      # every GPU of this machine, all 8 combinations
    python bench/train_gpu.py --models gpt2-350m --strategies fsdp --compile on --steps 40

Each combination compiles a plan, runs `python -m entrypoint train` on it (torchrun, one process per GPU,
synthetic data) and reads the trainer's metrics lines. The figures are medians over the logged steps after
the first third (compilation and warm-up excluded). MFU is relative to the catalog's dense bf16 peak of the
instance type matching this GPU. Needs torch with CUDA and this repository's Python dependencies
(hydra-core, omegaconf; `pip install -e .`); no Docker, no network.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402

INSTANCE_BY_GPU = {"H100": "p5.48xlarge", "H200": "p5en.48xlarge", "A100": "p4de.24xlarge", "A10G": "g5.48xlarge"}
MICRO_BATCH = {"gpt2-124m": 16, "gpt2-350m": 8}


def instance_for_this_gpu() -> str:
    name = torch.cuda.get_device_name(0)
    for model, instance in INSTANCE_BY_GPU.items():
        if model in name:
            return instance
    raise SystemExit(f"no catalog instance type for GPU '{name}'; pass --instance")


def plan_json(model: str, strategy: str, compiled: bool, gpus: int, instance: str, steps: int) -> str:
    overrides = [
        "name=bench",
        f"model={model}",
        f"parallelism={strategy}",
        "parallelism.mixed_precision=bf16",
        f"parallelism.micro_batch={MICRO_BATCH[model]}",
        "parallelism.grad_accum=1",
        "parallelism.global_batch=-1",
        f"hardware={instance}",
        "hardware.nodes=1",
        f"hardware.processes_per_node={gpus}",
        "data=synthetic",
        "image=cuda",
        "target=local",
        "trainer=default",
        f"trainer.steps={steps}",
        "trainer.warmup_steps=2",
        "trainer.log_interval=1",
        "trainer.checkpoint_interval=0",
        f"trainer.compile={'blocks' if compiled else 'false'}",
    ]
    return checked_plan(compose_config(overrides)).to_json()


def run(plan: str, folder: Path) -> list[dict]:
    path = folder / "plan.json"
    path.write_text(plan)
    env = {**os.environ, "DOCKYARD_ROOT": str(folder / "root"), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "entrypoint", "train", f"--plan={path}"]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(result.stdout[-4000:] + result.stderr[-4000:])
    lines = (folder / "root/output/data/metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def summarise(records: list[dict]) -> dict:
    measured = records[len(records) // 3 :]
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in measured),
        "mfu": statistics.median(r["mfu"] for r in measured),
        "memory_gib": max(r["memory_gib"] for r in measured),
        "final_loss": records[-1]["loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MICRO_BATCH), choices=list(MICRO_BATCH))
    parser.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"], choices=["ddp", "fsdp"])
    parser.add_argument("--compile", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--instance", default=None, help="catalog instance type for the MFU peak (from the GPU)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "train_gpu.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark runs on a GPU machine")
    instance = args.instance or instance_for_this_gpu()
    results = []
    print(f"{'model':<10} {'strategy':<8} {'compile':<7} {'tokens/s':>12} {'MFU':>7} {'memory GiB':>10}")
    for model in args.models:
        for strategy in args.strategies:
            for compiled in args.compile:
                with tempfile.TemporaryDirectory() as folder:
                    plan = plan_json(model, strategy, compiled == "on", args.gpus, instance, args.steps)
                    summary = summarise(run(plan, Path(folder)))
                row = {"model": model, "strategy": strategy, "compile": compiled, "gpus": args.gpus, **summary}
                results.append(row)
                print(
                    f"{model:<10} {strategy:<8} {compiled:<7} {summary['tokens_per_s']:>12,.0f} "
                    f"{summary['mfu']:>7.1%} {summary['memory_gib']:>10.1f}",
                    flush=True,
                )
    device = torch.cuda.get_device_name(0)
    args.out.write_text(json.dumps({"device": device, "instance": instance, "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
