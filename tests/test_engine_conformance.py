"""Every registered engine, at the smallest shape that runs it (two ranks, gloo on CPU, the tiny model, four
steps), holds to the `Engine` interface: its losses are finite, fall, and match DDP's (same seed, same
global batch); `evaluate` gives the loss the next forward gives and leaves every module in train mode; a
fresh engine loading a checkpoint gives the next step's loss exactly; `full_state_dict` names every
parameter of the model; its `parts` hold the blocks that run (the straggler detector times them). All
engines run in one torchrun (one process group), to keep this quick."""

import pytest

from entrypoint.trainer.engines import ENGINES
from tests.entrypoint_support import RERUN_TOLERANCE, run_plans_on_two_ranks, tiny_plan

pytestmark = pytest.mark.torchrun

ENGINE_PLANS = {
    "torch": [("parallelism=ddp",), ("parallelism=fsdp",)],
    "deepspeed": [("parallelism=zero3",)],
    "pipeline": [
        ("parallelism.pp=2", "parallelism.micro_batch=2", "parallelism.grad_accum=-1", "parallelism.global_batch=8")
    ],
}
"""Each registered engine's plans (global batch 8 sequences, as DDP's, the first: the reference)."""
TOLERANCE = 5e-4
"""As `test_entrypoint_training.EQUIVALENCE_TOLERANCE`: ZeRO-3 drifts to ~1e-4 from DDP in a few steps."""

SCRIPT = """
import gc, json, sys
from pathlib import Path
import torch, torch.distributed as dist
from compiler.spec import Plan
from entrypoint.trainer import checkpoint
from entrypoint.trainer.data.batches import Batches, make_source
from entrypoint.trainer.engines import make_engine
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.stragglers import ComputeClock, timed_modules

PLANS = json.loads(Path(sys.argv[1]).with_name("plans.json").read_text())
cpu = torch.device("cpu")
dist.init_process_group("gloo")
rank = dist.get_rank()


def mean(total, plan):
    total = total.detach().float().clone()
    dist.all_reduce(total)
    return total.item() / plan.layout.ranks_per_stage / plan.batch.grad_accum


def most(value, op=dist.ReduceOp.MAX):
    value = torch.tensor(float(value))
    dist.all_reduce(value, op=op)
    return value.item()


for name, path in PLANS.items():
    plan = Plan.from_json(Path(path).read_text())
    batches = Batches(make_source(plan, None), plan, plan.layout.coordinates(rank).dp)
    step = lambda number: [batches.micro_batch(number, micro) for micro in range(plan.batch.grad_accum)]
    engine = make_engine(plan, cpu)
    clock, blocks = ComputeClock(cpu), timed_modules(plan, engine.parts)
    clock.attach(blocks)
    losses = []
    for number in range(2):
        losses.append(mean(engine.forward_backward(step(number)), plan))
        engine.step(plan.trainer.lr)
    shape_inference = int(plan.layout.pp > 1)  # a pipeline's stages first run once on meta tensors
    timed = len(clock.spans) / (len(blocks) * (plan.batch.grad_accum * 2 + shape_inference))
    timed_s = clock.window()
    evaluated = engine.evaluate(step(2))
    training = all(module.training for module in gc.get_objects() if isinstance(module, torch.nn.Module))
    trained = engine.forward_backward(step(2))
    losses.append(mean(trained, plan))
    engine.step(plan.trainer.lr)
    folder = checkpoint.save(engine, Path(path).parent / "checkpoints", 3, rank == 0, {})
    losses.append(mean(engine.forward_backward(step(3)), plan))
    full = engine.full_state_dict()
    fresh = make_engine(plan, cpu)
    fresh.load(folder)
    resumed = mean(fresh.forward_backward(step(3)), plan)
    with torch.device("meta"):
        names = [n for n, _ in model_spec(plan.model).build(plan.model).named_parameters()]
    result = {
        "losses": losses,
        "evaluated": most(abs(evaluated.item() - trained.item())),
        "training": most(training, dist.ReduceOp.MIN) == 1,
        "resumed": resumed,
        "missing": [n for n in names if n not in full],
        "timed": most(timed, dist.ReduceOp.MIN),
        "timed_s": most(timed_s, dist.ReduceOp.MIN),
    }
    if rank == 0:
        print("RESULT", name, json.dumps(result), flush=True)
    del engine, fresh
"""


def test_every_engine_has_plans():
    assert set(ENGINE_PLANS) == set(ENGINES)


def test_every_engine_meets_the_interface(tmp_path):
    plans = {
        f"{engine}-{index}": tiny_plan(*overrides)
        for engine, variants in ENGINE_PLANS.items()
        for index, overrides in enumerate(variants)
    }
    results = run_plans_on_two_ranks(SCRIPT, plans, tmp_path, timeout=300)
    assert set(results) == set(plans)
    reference = results["torch-0"]["losses"]
    for name, result in results.items():
        losses = result["losses"]
        assert all(loss == loss and loss < 100 for loss in losses), (name, losses)
        assert losses[-1] < losses[0], (name, losses)
        assert losses == pytest.approx(reference, abs=TOLERANCE), name
        assert result["evaluated"] < 1e-5, name
        assert result["training"], name
        assert result["resumed"] == pytest.approx(losses[3], abs=RERUN_TOLERANCE), name
        assert result["missing"] == [], name
        # the straggler detector's hooks run once per block and micro batch on every rank
        assert result["timed"] == 1 and result["timed_s"] > 0, (name, result["timed"])
