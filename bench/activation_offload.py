"""What activation offload costs the built-in trainer's step: with and without `parallelism.activation_offload`,
under each activation checkpointing mode, against the same model without offload (the baseline).

One process, the decoder alone (forward and backward of `--micro-batches` micro batches, then the step's
gradients dropped), synthetic tokens from one seed. The step time is the median of `--steps` steps after
one warm-up. On CPU the host copy is a copy within the same memory, so this measures the bookkeeping and
copying the offload adds; on a GPU (`--device cuda`) the copies cross PCIe on a side stream into pinned
memory, and the peak GPU memory is printed beside the time.

    python bench/activation_offload.py [--model tiny] [--seq-len 256] [--micro-batch 8] [--steps 10]
"""

import argparse
import statistics
import time

import torch
from torch import nn

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec.schema import Checkpointing
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.offload import ActivationOffload


def step_seconds(model: nn.Module, tokens: torch.Tensor, args: argparse.Namespace) -> float:
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        for _ in range(args.micro_batches):
            MODELS["decoder"].loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
        if tokens.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--horizon", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    config = compose_config(["experiment=smoke", f"model={args.model}", f"model.seq_len={args.seq_len}"])
    model_config = checked_plan(config).model
    torch.manual_seed(0)
    model = MODELS["decoder"].build(model_config).to(device)
    shape = (args.micro_batch, args.seq_len + 1)
    tokens = torch.randint(model_config.vocab, shape, generator=torch.Generator().manual_seed(1)).to(device)
    print(
        f"{args.model}, seq_len {args.seq_len}, micro batch {args.micro_batch} × {args.micro_batches}, "
        f"horizon {args.horizon}, {device}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'checkpointing':<14} {'offload':<8} {'step s':>8} {'vs no offload':>13} {'peak GiB':>9}")
    for mode in Checkpointing:
        model.set_checkpointing(mode)
        baseline = None
        for offload in (None, ActivationOffload(device, args.horizon)):
            model.offload = offload
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            seconds = step_seconds(model, tokens, args)
            baseline = baseline or seconds
            peak = f"{torch.cuda.max_memory_allocated() / 2**30:.2f}" if device.type == "cuda" else "-"
            state = "on" if offload else "off"
            print(f"{mode.value:<14} {state:<8} {seconds:>8.4f} {seconds / baseline:>13.2f} {peak:>9}")


if __name__ == "__main__":
    main()
