"""How fast dockyard turns configs into plans.

Measures, in-process after imports: (1) compose + validate + write one plan.json, and (2) a
1,000-point grid of overrides composed, validated and serialized under one Hydra initialization.
Baseline: Hydra composing the same points with nothing else (no typed conversion, no checks, no plan) and
without dockyard's compose cache (`compiler.config.cache`), so the ratio is what dockyard's own work costs
on top of Hydra's composition, less what the cache saves.

    python bench/compile.py [--points 1000]
"""

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from compiler.config import cache
from compiler.config.compose import CONF_DIR, CONFIG_NAME, compose_config, compose_in_context
from compiler.launch.plan import checked_plan

MODELS = ["tiny", "gpt2-124m", "gpt2-350m", "llama3.2-1b", "llama3-8b"]
STRATEGIES = ["ddp", "fsdp", "fsdp-hybrid", "zero1", "zero2", "zero3"]
NODES = [1, 2, 4, 8, 16]
MICRO = [1, 2, 4, 8]
LRS = [1e-4, 3e-4]


def grid(points: int) -> list[list[str]]:
    combos = itertools.product(MODELS, STRATEGIES, NODES, MICRO, LRS)
    base = ["hardware=p5.48xlarge", "image=cuda", "hardware.memory_check=false"]  # oversized points compile too
    return [
        [
            *base,
            f"model={m}",
            f"parallelism={s}",
            f"hardware.nodes={n}",
            f"parallelism.micro_batch={b}",
            f"trainer.lr={lr}",
        ]
        for m, s, n, b, lr in itertools.islice(itertools.cycle(combos), points)
    ]


def one_plan_ms(repeats: int = 20) -> float:
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats):
            start = time.perf_counter()
            plan = checked_plan(compose_config(["experiment=llama3-8b-p5x4"]))
            (Path(folder) / "plan.json").write_text(plan.to_json(indent=2))
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def timed(points: list[list[str]], work) -> float:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        start = time.perf_counter()
        for overrides in points:
            work(overrides)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1000)
    points = grid(parser.parse_args().points)
    checked_plan(compose_config(["experiment=llama3-8b-p5x4"]))  # warm imports and caches: the first plan

    print(f"one plan (initialize, compose, validate, write plan.json): {one_plan_ms():.1f} ms (median of 20)")
    with cache.disabled():
        baseline = timed(points, lambda o: compose(CONFIG_NAME, overrides=o))
    dockyard = timed(points, lambda o: checked_plan(compose_in_context(o)).to_json())
    n = len(points)
    print(f"{n} points, Hydra compose only (baseline): {baseline:.2f} s = {n / baseline:,.0f} configs/s")
    print(f"{n} points, compose + validate + plan JSON:  {dockyard:.2f} s = {n / dockyard:,.0f} configs/s")
    print(f"ratio dockyard / baseline time: {dockyard / baseline:.2f}x")


if __name__ == "__main__":
    main()
