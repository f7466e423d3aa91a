"""What the streamed loss (`trainer.loss_chunk`) saves: the peak memory and step time of one forward and backward
pass of a one-layer built-in decoder with a 152K vocabulary (Qwen2's 152064) at seq_len 4096, the loss streamed
in chunks against the plain cross-entropy of the whole logits (the baseline, `trainer.loss_chunk=0`).

Each variant runs in a fresh process (peak resident memory is a high-water mark that never falls), and its peak is
the growth of the process's maximum resident set over the step, after the model and tokens exist. The step time
is the median of `--steps` steps after one warm-up. On CPU and in float32, the whole logits are 2.3 GiB at these
shapes, and the plain loss holds them, their log-softmax and their gradient at once.

    python bench/chunked_loss.py [--seq-len 4096] [--vocab 152064] [--chunks 0,1024] [--steps 1]
"""

import argparse
import resource
import statistics
import subprocess
import sys
import time

import torch

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.objective import NextToken


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(args: argparse.Namespace, chunk: int) -> None:
    """In this process: one variant's step, printed as `seconds peak_MiB` for the parent."""
    overrides = ["experiment=smoke", "model=tiny", "model.layers=1", f"model.vocab={args.vocab}"]
    overrides += [f"model.context={args.seq_len}", f"model.seq_len={args.seq_len}", "model.tied_embeddings=false"]
    model_config = checked_plan(compose_config(overrides)).model
    torch.manual_seed(0)
    model = MODELS["decoder"].build(model_config)
    tokens = torch.randint(args.vocab, (1, args.seq_len + 1), generator=torch.Generator().manual_seed(1))
    objective = NextToken(MODELS["decoder"], chunk)
    before = peak_mib()
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        objective.loss(model, tokens[:, :-1], tokens[:, 1:]).backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=False)
    print(f"{statistics.median(times[1:])} {peak_mib() - before}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=152064)
    parser.add_argument("--chunks", default="0,1024", help="loss_chunk values; 0 is the plain loss")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--variant", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant is not None:
        measure(args, args.variant)
        return
    logits_gib = args.seq_len * args.vocab * 4 / 2**30
    print(f"vocab {args.vocab}, seq_len {args.seq_len}, micro batch 1, float32 logits {logits_gib:.2f} GiB, CPU")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'loss_chunk':>10} {'step s':>8} {'peak MiB':>9} {'time vs plain':>14} {'peak vs plain':>14}")
    baseline: tuple[float, float] | None = None
    for chunk in (int(value) for value in args.chunks.split(",")):
        command = [sys.executable, __file__, f"--seq-len={args.seq_len}", f"--vocab={args.vocab}"]
        command += [f"--steps={args.steps}", f"--variant={chunk}"]
        seconds, peak = map(float, subprocess.run(command, check=True, capture_output=True, text=True).stdout.split())
        baseline = baseline or (seconds, peak)
        name = "0 (plain)" if chunk == 0 else str(chunk)
        ratios = f"{seconds / baseline[0]:>14.2f} {peak / baseline[1]:>14.2f}"
        print(f"{name:>10} {seconds:>8.2f} {peak:>9.0f} {ratios}")


if __name__ == "__main__":
    main()
