"""`model=hf` mixtures of experts on two real torchrun ranks (gloo, CPU), on a tiny Qwen3-MoE saved by
transformers: the checkpoint loads sharded from the Hub's per-expert layout and from transformers' fused one
(the loss transformers' own `from_pretrained` model gives, balancing term included); expert parallelism
(`parallelism.ep=2`: each rank holds 2 of the 4 experts, tokens go to them by all-to-all) trains step by step
as ep=1 does, and resumes exactly from its checkpoint; the router's metrics are logged; LoRA adapts the
attention and leaves the experts frozen; the export is what `save_pretrained` writes and loads in
transformers with its expert weights changed, the same under ep=2 as under ep=1."""

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from compiler.spec.contract import EXPERT_LOAD_IMBALANCE, MOE_AUX_LOSS
from tests.entrypoint_support import run_on_two_ranks, tiny_plan, write_plan
from tests.pretrained import save_checkpoint

pytestmark = pytest.mark.torchrun

LOADED_TOLERANCE = 1e-5
"""As `test_pretrained_training.LOADED_TOLERANCE` (fp32 on both sides; the reduction order differs)."""
EP_TOLERANCE = 5e-5
"""ep=2 against ep=1 per step's loss: the same sums in another order (the experts see their tokens grouped by
source rank, their gradient is summed by the all-to-all's backward before FSDP divides it), fp32; measured
6e-6 at the third step."""
WEIGHT_TOLERANCE = 2e-4
"""ep=2 against ep=1 per exported weight after 3 AdamW steps at lr 1e-2 (Adam's normalisation enlarges the
last bits of near-zero gradients); measured 3e-5."""

SCRIPT = """
import json, sys
from pathlib import Path
import torch, torch.distributed as dist
from transformers import AutoModelForCausalLM
from compiler.spec import Plan
from entrypoint.trainer import checkpoint
from entrypoint.trainer.data.batches import Batches, make_source
from entrypoint.trainer.engines import make_engine
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.models.experts import expert_lines
from entrypoint.trainer.models.loss import mean_cross_entropy

PLANS = json.loads(Path(sys.argv[1]).with_name("plans.json").read_text())
cpu = torch.device("cpu")
dist.init_process_group("gloo")
rank = dist.get_rank()


def mean(value):
    value = value.detach().clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


for name, path in PLANS.items():
    plan = Plan.from_json(Path(path).read_text())
    batches = Batches(make_source(plan, None), plan, plan.layout.coordinates(rank).dp)
    inputs, targets = batches.micro_batch(0, 0)
    theirs = AutoModelForCausalLM.from_pretrained(plan.model.path, dtype=torch.float32).eval()
    with torch.no_grad():
        output = theirs(input_ids=inputs, output_router_logits=True)
        balancing = theirs.config.router_aux_loss_coef * output.aux_loss
        reference = mean(mean_cross_entropy(output.logits, targets) + balancing)
    engine = make_engine(plan, cpu)
    loaded = mean(engine.evaluate([batches.micro_batch(0, 0)]))
    engine.objective.metrics()
    losses = []
    for step in range(3):
        losses.append(mean(engine.forward_backward([batches.micro_batch(step, 0)])))
        engine.step(plan.trainer.lr)
    metrics = engine.objective.metrics()
    trainable = sorted(n for n, p in engine.model.named_parameters() if p.requires_grad)
    lines = expert_lines(engine.parts[0], plan.layout.ep, plan.model.lora.targets if plan.model.lora.rank else None)
    state = engine.full_state_dict()
    resumed = None
    if plan.layout.ep > 1:  # a checkpoint restores each rank's experts and their AdamW moments exactly
        folder = checkpoint.save(engine, Path(path).parent / "checkpoints", 3, rank == 0, {})
        fresh = make_engine(plan, cpu)
        fresh.load(folder)
        resumed = []
        for step in (3, 4):
            ours, theirs = (mean(each.forward_backward([batches.micro_batch(step, 0)])) for each in (engine, fresh))
            resumed.append(abs(ours - theirs))
            engine.step(plan.trainer.lr)
            fresh.step(plan.trainer.lr)
        del fresh
    if rank == 0:
        model_spec(plan.model).weights.save(Path(path).parent / "model", state, plan.to_dict()["model"])
        result = {"loaded": loaded, "reference": reference, "losses": losses, "metrics": metrics}
        result |= {"trainable": trainable, "lines": lines, "resumed": resumed}
        print(f"RESULT {name} {json.dumps(result)}", flush=True)
    del engine
"""
PLANS = {
    "ep1": ("parallelism.ep=1",),
    "ep1-fused": ("parallelism.ep=1",),
    "ep2": ("parallelism.ep=2",),
    "ep2-lora": ("parallelism.ep=2", "model.lora.rank=4"),
}
"""The per-expert checkpoint at ep=1 (the reference) and ep=2, the fused one at ep=1, and LoRA at ep=2."""


@pytest.fixture(scope="module")
def moe_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return {
        "per-expert": save_checkpoint(root / "per-expert", "qwen3_moe"),
        "fused": save_checkpoint(root / "fused", "qwen3_moe", fused=True),
    }


def test_a_mixture_of_experts_loads_either_layout_and_trains_alike_under_expert_parallelism(tmp_path, moe_checkpoints):
    paths = {}
    for name, overrides in PLANS.items():
        source = moe_checkpoints["fused" if "fused" in name else "per-expert"]
        plan = tiny_plan("model=hf", f"model.path={source}", "parallelism=fsdp", "trainer.lr=1e-2", *overrides)
        assert plan.layout.ep == (2 if name.startswith("ep2") else 1)
        paths[name] = str(write_plan(plan, tmp_path / name))
    (tmp_path / "plans.json").write_text(json.dumps(paths))
    output = run_on_two_ranks(SCRIPT, tiny_plan("model=hf", f"model.path={moe_checkpoints['fused']}"), tmp_path, 300)
    results = {
        name: json.loads(data)
        for _, name, data in (line.split(" ", 2) for line in output.splitlines() if line.startswith("RESULT"))
    }
    assert set(results) == set(PLANS)
    for name, result in results.items():
        assert result["loaded"] == pytest.approx(result["reference"], abs=LOADED_TOLERANCE), name
        assert result["losses"][-1] < result["losses"][0], name
        if "lora" not in name:
            assert result["losses"] == pytest.approx(results["ep1"]["losses"], abs=EP_TOLERANCE), name
        assert result["metrics"][MOE_AUX_LOSS] > 0, name
        assert 1 <= result["metrics"][EXPERT_LOAD_IMBALANCE] <= 4, name  # at most all tokens on one of 4 experts

    assert results["ep2"]["resumed"] == [0.0, 0.0]
    assert results["ep2"]["lines"] == ["experts           4 per MoE layer × 2 layers, ep 2: 2 per rank"]
    lora = results["ep2-lora"]
    assert lora["trainable"] and all(".lora_" in name and "_proj" in name for name in lora["trainable"])
    assert lora["lines"][1].startswith("lora on experts   adapts q_proj, k_proj, v_proj, o_proj; the experts'")

    source = AutoModelForCausalLM.from_pretrained(moe_checkpoints["per-expert"]).state_dict()
    exported = {name: AutoModelForCausalLM.from_pretrained(tmp_path / name / "model").state_dict() for name in PLANS}
    with safe_open(tmp_path / "ep2" / "model" / "model.safetensors", framework="pt") as weights:
        written = set(weights.keys())
    assert "model.layers.1.mlp.experts.3.gate_proj.weight" in written  # as save_pretrained writes an MoE
    assert not any(name.endswith("experts.gate_up_proj") for name in written)
    experts = "model.layers.1.mlp.experts.gate_up_proj"
    assert not torch.allclose(exported["ep2"][experts], source[experts])
    torch.testing.assert_close(exported["ep2-lora"][experts], source[experts], atol=0, rtol=0)  # frozen
    for name in ("ep1-fused", "ep2"):
        for key, value in exported["ep1"].items():
            torch.testing.assert_close(exported[name][key], value, atol=WEIGHT_TOLERANCE, rtol=0, msg=f"{name} {key}")
