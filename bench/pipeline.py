"""Pipeline schedules on CPU at pp=2: the measured bubble and step time against the planner's prediction.

    python bench/pipeline.py --out bench/pipeline_cpu.md

For each schedule the built-in trainer runs pp=2 in two torchrun processes (gloo, one thread each) and,
as the reference, the same step unpipelined in one process: the same model, micro batches and global
batch. The reference's step time T₁ is the whole step's work on one rank. The planner splits it over the
pipeline ranks by their FLOPs (`speed.flops_per_token_of` per stage share: the last stage also runs
the output head) and stretches the slowest rank's share by the schedule's bubble:

    predicted step = T₁ × slowest share / (1 − bubble),   bubble = (pp − 1) / v / (m + (pp − 1) / v)

(v = 2 virtual stages per rank for the interleaved schedules, and a third of that for zero-bubble). The
measured bubble is 1 − T₁ × slowest share / measured step: everything a rank does besides its own
compute (waiting for its neighbour, sending activations, the schedule's bookkeeping) counts as bubble.
Step times are medians of the steps after the first two, the least of `--repeat` runs (the run least
disturbed by other work on the machine). T₁ is measured again right before each row, so that a row's
ratio compares runs taken under the same load. A control row runs the same step as DDP over two
processes (half the micro batches each, no pipeline, predicted T₁ / 2): its ratio is what two processes
get from this machine at all (cores shared with other work, the gradient all-reduce), so the schedules'
ratios are read against it. The report gives the machine's cores and load.

Needs torch and this repository's Python dependencies (hydra-core, omegaconf); no Docker, no network.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402
from compiler.planner import estimate, speed  # noqa: E402
from compiler.planner.pipeline import bubble_fraction  # noqa: E402
from compiler.spec import Plan  # noqa: E402
from compiler.spec.ranks import PIPELINE_SCHEDULES  # noqa: E402

MODEL = (
    "experiment=smoke",
    "hardware.nodes=1",
    "model.layers=8",
    "model.hidden=256",
    "model.ffn_hidden=1024",
    "model.vocab=4096",
    "model.seq_len=128",
    "model.tied_embeddings=false",
    "parallelism.micro_batch=2",
    "trainer.log_interval=1",
    "trainer.checkpoint_interval=0",
)


def plan_for(overrides: tuple[str, ...]) -> Plan:
    return checked_plan(compose_config(overrides))


def step_seconds(plan: Plan, skip: int, repeat: int) -> float:
    """The least of `repeat` runs' median step times."""
    return min(median_step_seconds(plan, skip) for _ in range(repeat))


def median_step_seconds(plan: Plan, skip: int) -> float:
    """The median step time of the trainer running `plan`, from its metrics (tokens per second per step)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "plan.json").write_text(plan.to_json())
        env = {**os.environ, "DOCKYARD_ROOT": str(root), "DOCKYARD_BACKEND": "gloo", "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = str(REPO)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [
            f"--nproc-per-node={plan.layout.world_size}",
            "-m",
            "entrypoint.trainer",
            f"--plan={root}/plan.json",
        ]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
        records = [json.loads(line) for line in (root / "output/data/metrics.jsonl").read_text().splitlines()]
    times = [plan.batch.tokens_per_step / r["tokens_per_s"] for r in records if r["step"] > skip]
    return statistics.median(times)


def slowest_share(plan: Plan) -> float:
    """The slowest pipeline rank's share of the step's FLOPs, as the planner divides them."""
    shares = estimate.pipeline_shares(plan.model, plan.parallelism, plan.layout)
    work = [speed.flops_per_token_of(plan.model, plan.layout.tp, share) for share in shares]
    return max(work) / speed.flops_per_token(plan.model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    common = (*MODEL, f"trainer.steps={args.steps}", "parallelism.global_batch=-1")
    skip = 2
    reference = plan_for((*common, "hardware.processes_per_node=1", f"parallelism.grad_accum={args.microbatches}"))
    rows = [
        f"CPU, {os.cpu_count()} cores (load {os.getloadavg()[0]:.1f}), one thread per process; "
        f"{reference.parameters:,} parameters, "
        f"{args.microbatches} micro batches of {reference.batch.micro_batch} × {reference.batch.seq_len} tokens; "
        f"each time the least of {args.repeat} runs",
        "",
        "| schedule | T₁ (s) | bubble predicted | bubble measured | step predicted (s) | step measured (s) | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    control = plan_for((*common, "hardware.processes_per_node=2", f"parallelism.grad_accum={args.microbatches // 2}"))
    whole, measured = step_seconds(reference, skip, args.repeat), step_seconds(control, skip, args.repeat)
    rows.append(
        f"| ddp × 2 (control) | {whole:.3f} | – | – | {whole / 2:.3f} | {measured:.3f} | {measured / (whole / 2):.2f} |"
    )
    print(rows[-1], flush=True)
    for schedule in PIPELINE_SCHEDULES:
        plan = plan_for(
            (
                *common,
                "hardware.processes_per_node=2",
                "parallelism.pp=2",
                f"parallelism.pp_schedule={schedule}",
                f"parallelism.pp_microbatches={args.microbatches}",
                "parallelism.grad_accum=-1",
            )
        )
        whole = step_seconds(reference, skip, args.repeat)
        busy = whole * slowest_share(plan)
        bubble = bubble_fraction(plan.layout.pp, plan.batch.grad_accum, schedule)
        predicted = busy / (1 - bubble)
        measured = step_seconds(plan, skip, args.repeat)
        bubbles = f"{bubble:.1%} | {1 - busy / measured:.1%}"
        rows.append(
            f"| {schedule} | {whole:.3f} | {bubbles} | {predicted:.3f} | {measured:.3f} | {measured / predicted:.2f} |"
        )
        print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
