"""What QLoRA's quantized base (`model.lora.quantize_base`) holds and costs, against the same LoRA run on an
unquantized base (the baseline): the weights' bytes the trainer's model=hf actually holds (parameters, and each
quantized layer's packed weight with its scales) beside the planner's `parameters` figure, and the median
time of a forward and backward pass (each quantized matmul dequantizes its weight, twice a step).

One process, fp32 (no autocast, so that the planner's figure is the weights alone), a Llama-shaped checkpoint
with random weights saved at the start, LoRA on every linear layer.

    PYTHONPATH=. python bench/qlora_memory.py [--hidden 512] [--layers 4] [--steps 5]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from entrypoint.trainer.engines.base import materialise
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.quantized import QuantizedLinear
from tests.pretrained import save_checkpoint

MIB = 2**20
VOCAB = 2048


def held_bytes(model: nn.Module) -> int:
    """The parameters' bytes and the quantized layers' packed weights and scales."""
    quantized = sum(part.held_bytes() for part in model.modules() if isinstance(part, QuantizedLinear))
    return quantized + sum(param.numel() * param.element_size() for param in model.parameters())


def step_seconds(model: nn.Module, tokens: torch.Tensor, steps: int) -> float:
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        model(input_ids=tokens).logits.square().mean().backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        Path(folder).chmod(0o755)  # readable by the image's user, as the plan asks of a checkpoint
        shape = dict(hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3, num_hidden_layers=args.layers)
        path = save_checkpoint(
            Path(folder), "llama", vocab=VOCAB, num_attention_heads=8, num_key_value_heads=8, **shape
        )
        tokens = torch.randint(0, VOCAB, (4, 128), generator=torch.Generator().manual_seed(0))
        results = {}
        for kind in ("none", "nf4", "int8"):
            overrides = ["model=hf", f"model.path={path}", "model.seq_len=128", "hardware=p4d.24xlarge"]
            overrides += ["parallelism=ddp", "parallelism.mixed_precision=fp32"]  # the planner's GPU estimate
            overrides += ["model.lora.rank=8", "model.lora.targets=[all-linear]", f"model.lora.quantize_base={kind}"]
            plan = checked_plan(compose_config(overrides))
            with torch.device("meta"):
                model = MODELS["hf"].build(plan.model)
            materialise(MODELS["hf"], model, torch.device("cpu"))
            results[kind] = (
                held_bytes(model),
                plan.estimate.memory.parameters,
                step_seconds(model, tokens, args.steps),
            )
    base_bytes, _, base_seconds = results["none"]
    print(f"llama hidden {args.hidden}, {args.layers} layers, LoRA rank 8 on all-linear; baseline: quantize_base=none")
    columns = ("held MiB", 10), ("planned MiB", 13), ("held/planned", 14), ("held/baseline", 15), ("step s", 9)
    print(f"{'base':<6}" + "".join(f"{name:>{width}}" for name, width in columns) + f"{'/baseline':>11}")
    for kind, (held, planned, seconds) in results.items():
        print(
            f"{kind:<6}{held / MIB:>10.2f}{planned / MIB:>13.2f}{held / planned:>14.3f}"
            f"{held / base_bytes:>15.3f}{seconds:>9.3f}{seconds / base_seconds:>11.2f}"
        )


if __name__ == "__main__":
    main()
