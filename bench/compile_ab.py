"""What torch.compile buys the built-in trainer on CPU: eager against compiled step time, and the compile time.

In one process (a gloo group of one rank, so the trainer's own DDP engine runs as in a job): the same plan
with `trainer.compile=false` and with `trainer.compile=SCOPE`, each trained `--steps` steps on synthetic
tokens from the same seed. The first step (where inductor compiles) is timed apart; the step time is the
median of the others. Inductor's cache goes to a fresh folder, so the compile time is a cold one; a second
compiled run on the same cache gives the warm one (a restarted job's).

    python bench/compile_ab.py [--model tiny] [--seq-len 256] [--micro-batch 8] [--steps 20] [--scope blocks]
"""

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec import Plan
from entrypoint.trainer.models import model_spec


def plan_for(args: argparse.Namespace, scope: str) -> Plan:
    overrides = [
        "experiment=smoke",
        "hardware.nodes=1",
        "hardware.processes_per_node=1",
        "parallelism=ddp",
        f"model={args.model}",
        f"model.seq_len={args.seq_len}",
        f"parallelism.micro_batch={args.micro_batch}",
        f"trainer.steps={args.steps}",
        f"trainer.compile={scope}",
    ]
    return checked_plan(compose_config(overrides))


def timed_steps(plan: Plan) -> tuple[list[float], list[float]]:
    """Seconds of each step, and each step's loss."""
    from entrypoint.trainer.engines.native import TorchEngine

    torch.manual_seed(plan.trainer.seed)
    engine = TorchEngine(plan, model_spec(plan.model), torch.device("cpu"))
    generator = torch.Generator().manual_seed(plan.trainer.seed)
    shape = (plan.batch.micro_batch, plan.model.seq_len + 1)
    seconds, losses = [], []
    for _ in range(plan.trainer.steps):
        tokens = torch.randint(plan.model.vocab, shape, generator=generator)
        start = time.perf_counter()
        loss = engine.forward_backward([(tokens[:, :-1], tokens[:, 1:])])
        engine.step(plan.trainer.lr)
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    return seconds, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--scope", default="blocks", choices=["blocks", "model"])
    args = parser.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    runs = {}
    for name, scope in (("eager", "false"), ("compiled", args.scope), ("compiled, warm cache", args.scope)):
        torch._dynamo.reset()  # the warm run compiles again, from inductor's cache on disk
        runs[name] = timed_steps(plan_for(args, scope))
    eager_step = statistics.median(runs["eager"][0][1:])
    print(
        f"{args.model}, seq_len {args.seq_len}, micro batch {args.micro_batch}, {args.steps} steps, "
        f"compile={args.scope}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'run':<22} {'first step s':>12} {'step s':>8} {'speed-up':>8} {'compile s':>9} {'final loss':>10}")
    for name, (seconds, losses) in runs.items():
        step = statistics.median(seconds[1:])
        print(
            f"{name:<22} {seconds[0]:>12.3f} {step:>8.4f} {eager_step / step:>8.2f} "
            f"{seconds[0] - step:>9.2f} {losses[-1]:>10.5f}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
