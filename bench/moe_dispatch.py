"""What expert parallelism costs and saves a CPU step: the tiny Qwen3-MoE of the tests (or wider, `--hidden`)
under FSDP2 on two gloo ranks at `parallelism.ep=2`, against the same run at ep=1 (the baseline).

Printed per degree: the median step time (forward, backward and AdamW of one micro batch, after one warm-up),
the share of it spent in the token dispatch's all-to-alls (forward and backward, from torch's profiler: the
c10d all-to-all operations' time, counts and tokens; on gloo a collective returns when its peer arrives, so
this includes waiting for the slower rank), and the memory a rank holds: its model state (parameters,
gradients and AdamW's two moments, the local shards' bytes: the same at both degrees, since FSDP2 already
shards the experts over the two ranks at ep=1) and the process's peak resident set (mostly torch's own at
this size).
The script starts torchrun on itself.

    python bench/moe_dispatch.py [--experts 4] [--hidden 64] [--micro-batch 4] [--steps 10]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def checkpoint(folder: Path, args: argparse.Namespace) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "qwen3_moe",
        vocab_size=256,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3 // 2,
        moe_intermediate_size=args.hidden // 2,
        num_experts=args.experts,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=args.hidden // 4,
        max_position_embeddings=128,
        output_router_logits=True,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for file in folder.iterdir():  # the planner's local target checks that the containers' user could read it
        file.chmod(0o644)
    return folder


def plans(folder: Path, args: argparse.Namespace) -> dict[int, Path]:
    sys.path.insert(0, str(REPO))
    from compiler.config.compose import compose_config
    from compiler.launch.plan import checked_plan

    written = {}
    for ep in (1, 2):
        overrides = ["experiment=smoke", "model=hf", f"model.path={folder / 'model'}", "hardware.nodes=1"]
        overrides += ["parallelism=fsdp", f"parallelism.ep={ep}", f"parallelism.micro_batch={args.micro_batch}"]
        overrides += ["parallelism.grad_accum=1", "parallelism.global_batch=-1", "trainer.checkpoint_interval=0"]
        path = folder / f"ep{ep}.json"
        path.write_text(checked_plan(compose_config(overrides)).to_json())
        written[ep] = path
    return written


def state_bytes(engine) -> int:
    """This rank's parameters, gradients and optimizer state (local shards), in bytes."""
    from torch.distributed.tensor import DTensor

    def local(tensor):
        return tensor.to_local() if isinstance(tensor, DTensor) else tensor

    total = 0
    for param in engine.model.parameters():
        total += local(param).nbytes + (local(param.grad).nbytes if param.grad is not None else 0)
    for state in engine.optimizer.state.values():
        total += sum(local(value).nbytes for value in state.values() if hasattr(value, "nbytes"))
    return total


def worker(plan_path: Path, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from compiler.spec import Plan
    from entrypoint.trainer.data.batches import Batches, make_source
    from entrypoint.trainer.engines import make_engine

    dist.init_process_group("gloo")
    plan = Plan.from_json(plan_path.read_text())
    cpu = torch.device("cpu")
    batches = Batches(make_source(plan, None), plan, plan.layout.coordinates(dist.get_rank()).dp)
    engine = make_engine(plan, cpu)
    times = []
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for step in range(steps + 1):
            dist.barrier()
            start = time.perf_counter()
            engine.forward_backward([batches.micro_batch(step, 0)])
            engine.step(plan.trainer.lr)
            times.append(time.perf_counter() - start)
    exchanged_us = sum(
        event.cpu_time_total for event in profiler.key_averages() if "alltoall" in event.key.replace("_", "")
    )
    record = {
        "step_s": statistics.median(times[1:]),
        "dispatch_s": exchanged_us / 1e6 / (steps + 1),
        "state_bytes": state_bytes(engine),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(record), flush=True)
    from entrypoint.trainer.teardown import leave

    leave(0)


def run(plan_path: Path, steps: int) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-port=29631"]
    command += [__file__, "--worker", str(plan_path), "--steps", str(steps)]
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    (line,) = (line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--worker", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        checkpoint(folder / "model", args)
        results = {ep: run(path, args.steps) for ep, path in plans(folder, args).items()}
    print(
        f"qwen3_moe {args.experts} experts (2 per token), hidden {args.hidden}, 2 layers, micro batch "
        f"{args.micro_batch}, FSDP2 on 2 gloo ranks, 1 thread each, median of {args.steps} steps"
    )
    print("ep  step s   all-to-all s  share   model state / rank  peak RSS")
    for ep, result in results.items():
        share = result["dispatch_s"] / result["step_s"]
        print(
            f"{ep:<3} {result['step_s']:.4f}  {result['dispatch_s']:.4f}        {share:6.1%}  "
            f"{result['state_bytes'] / 2**10:10.1f} KiB      {result['peak_rss_mib']:.0f} MiB"
        )
    base, ep2 = results[1], results[2]
    print(
        f"ep=2 / ep=1 (baseline): step time {ep2['step_s'] / base['step_s']:.2f}×, "
        f"model state per rank {ep2['state_bytes'] / base['state_bytes']:.2f}×"
    )


if __name__ == "__main__":
    main()
