"""What a checkpoint costs the training loop: sync against async (`trainer.checkpoint_async`).

Three runs of the same plan on two CPU ranks (DDP, a model big enough that a checkpoint takes a while to
write): no checkpoints (the baseline), sync checkpoints, and async ones, every `--every` steps. Each run's
wall time of its steps (the trainer's own `elapsed_s` at the last step) against the baseline's, divided by
the number of checkpoints, is the step-time overhead of one checkpoint. The ratio is async's overhead
against sync's.

    python bench/checkpoint.py [--steps 12] [--every 3] [--hidden 768] [--layers 6]
"""

import argparse
import tempfile
from pathlib import Path

from tests.entrypoint_support import tiny_plan, train


def elapsed(root: Path, overrides: list[str]) -> float:
    records = train(tiny_plan(*overrides), root, timeout=1800)
    return records[-1]["elapsed_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    model = [f"model.hidden={args.hidden}", f"model.ffn_hidden={4 * args.hidden}", f"model.layers={args.layers}"]
    base = [*model, f"trainer.steps={args.steps}", "trainer.log_interval=1", "parallelism.micro_batch=2"]
    checkpoints = (args.steps - 1) // args.every  # none at the last step: the final model is saved instead
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        plan = tiny_plan(*base)
        print(f"model     {plan.parameters:,} parameters, 2 ranks (DDP), {args.steps} steps, {checkpoints} checkpoints")
        none = elapsed(root / "none", [*base, "trainer.checkpoint_interval=0"])
        sync = elapsed(root / "sync", [*base, f"trainer.checkpoint_interval={args.every}"])
        background = elapsed(
            root / "async", [*base, f"trainer.checkpoint_interval={args.every}", "trainer.checkpoint_async=true"]
        )
    sync_cost, async_cost = (sync - none) / checkpoints, (background - none) / checkpoints
    print(f"no checkpoints  {none:.2f} s for {args.steps} steps ({none / args.steps:.3f} s/step): the baseline")
    print(f"sync            {sync:.2f} s: {sync_cost:.3f} s per checkpoint")
    print(f"async           {background:.2f} s: {async_cost:.3f} s per checkpoint")
    print(f"ratio           async/sync overhead per checkpoint = {async_cost / sync_cost:.2f}")


if __name__ == "__main__":
    main()
