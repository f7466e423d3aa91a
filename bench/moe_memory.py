"""The planner's predicted peak memory per rank for a tiny mixture of experts at ep=1 and ep=2: the predicted
side of the MoE memory benchmark (the trainer's measured peak is the runtime's side, `entrypoint/`).

    python bench/moe_memory.py                       # a tiny Qwen3-MoE written here (config.json only)
    python bench/moe_memory.py --path CHECKPOINT      # the checkpoint the measured run trains

The run is the smoke experiment's: two local nodes × 2 CPU processes, FSDP, micro batch 4, with `model=hf`; the
tensor terms (model states, activations, logits, communication buffers) are printed per rank, for ep=1 and
ep=2, as the measured side counts them (live tensor storage: no CUDA context, no allocator margin). CPU
instance types get no estimate in a plan (`plan.estimate` is None), so the estimator is called directly on the
plan's model, parallelism and layout, ep changed. Baseline: ep=1 (the ratio is ep=2 over it). No network.
"""

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402
from compiler.planner import estimate  # noqa: E402
from compiler.planner.models import model_facts  # noqa: E402

TINY_MOE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
"""A tiny Qwen3-MoE: 8 experts, 2 per token (the runtime's conformance test's shape class)."""
KIB = 1024


def tiny_checkpoint(folder: Path) -> Path:
    from transformers import AutoConfig

    AutoConfig.for_model("qwen3_moe", **TINY_MOE).save_pretrained(folder)
    folder.chmod(0o755)  # the local target's nodes read it as the image's user
    return folder


def predicted(path: Path, seq_len: int) -> dict[int, estimate.Memory]:
    overrides = ("experiment=smoke", "model=hf", f"model.path={path}", f"model.seq_len={seq_len}", "parallelism=fsdp")
    plan = checked_plan(compose_config(overrides))
    return {
        ep: estimate.memory(
            plan.model, plan.parallelism, dataclasses.replace(plan.layout, ep=ep), plan.batch.micro_batch
        )
        for ep in (1, 2)
    }


def tensors(memory: estimate.Memory) -> int:
    return (
        memory.parameters
        + memory.gradients
        + memory.optimizer
        + memory.activations
        + memory.logits
        + memory.communication
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, help="a checkpoint folder (config.json); default: a tiny Qwen3-MoE")
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = args.path or tiny_checkpoint(Path(scratch))
        memories = predicted(path, args.seq_len)
        facts = model_facts(checked_plan(compose_config(("experiment=smoke", "model=hf", f"model.path={path}"))).model)
    print(
        f"model: {facts.total:,} parameters ({facts.active_parameters:,} active), routed experts {facts.parameters.routed_experts:,}"
    )
    print("predicted per rank (KiB): ep  parameters  gradients  optimizer  activations  logits  communication  tensors")
    for ep, memory in memories.items():
        terms = (
            memory.parameters,
            memory.gradients,
            memory.optimizer,
            memory.activations,
            memory.logits,
            memory.communication,
        )
        print(
            f"                          {ep}  "
            + "  ".join(f"{t / KIB:10.1f}" for t in terms)
            + f"  {tensors(memory) / KIB:8.1f}"
        )
    print(f"ratio ep=2 / ep=1 (baseline): {tensors(memories[2]) / tensors(memories[1]):.3f}")


if __name__ == "__main__":
    main()
