"""trainer.objective=dpo in the plan: its options checked with the key and the fix, and the planner's memory
with the reference model and the pairs' doubled tokens."""

import dataclasses

import pytest

from compiler.config.compose import compose_config
from compiler.core import catalog
from compiler.planner import estimate
from compiler.planner.layout import resolve_batch, resolve_layout
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from tests.helpers import plan_for

DPO = "trainer.objective=dpo"
LLAMA_P5 = "experiment=llama3-8b-p5x4"

INVALID = [
    ([DPO, "trainer.dpo.beta=0"], "trainer.dpo.beta", "must be positive"),
    ([DPO, "trainer.dpo.loss=kto"], "trainer.dpo.loss", "Invalid value 'kto'"),
    ([DPO, "trainer.dpo.label_smoothing=0.5"], "trainer.dpo.label_smoothing", "must be in [0, 0.5)"),
    ([DPO, "trainer.dpo.label_smoothing=0.1"], "trainer.dpo.label_smoothing", "unused by loss=sigmoid"),
    (["trainer.dpo.beta=0.5"], "trainer.dpo", "only used with trainer.objective=dpo"),
    (
        [DPO, "trainer=script", "trainer.source_dir=src", "trainer.script=t.py"],
        "trainer.objective",
        "a user script trains as it is written",
    ),
    (
        [DPO, "parallelism.pp=2", "model.tied_embeddings=false", "parallelism.dp=-1"],
        "trainer.objective",
        "not supported with pipeline parallelism",
    ),
    ([DPO], "trainer.objective", "not built into the trainer yet"),
]


@pytest.mark.parametrize(("overrides", "key", "message"), INVALID, ids=[case[1] + ":" + case[2] for case in INVALID])
def test_invalid_dpo_config_names_key_and_fix(overrides, key, message):
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    assert caught.value.key == key
    assert message in caught.value.one_line()


def test_sft_stays_the_default_and_its_plan_holds_no_reference():
    plan = plan_for(LLAMA_P5)
    assert plan.trainer.objective is schema.Objective.sft
    assert plan.estimate.memory.reference == 0 and "reference" not in plan.estimate.memory.terms


def dpo_memory(*overrides: str) -> tuple[estimate.Memory, int]:
    """The planner's peak per GPU and tokens per step for the composed config (the plan itself is refused while
    the trainer lacks its DPO loop)."""
    config = compose_config((LLAMA_P5, *overrides))
    instance = catalog.instance_type(config.hardware.instance_type)
    layout = resolve_layout(config, instance)
    batch = estimate.with_pairs(resolve_batch(config.parallelism, config.model.seq_len, layout), config.trainer)
    par = dataclasses.replace(config.parallelism, grad_accum=batch.grad_accum)
    dpo = estimate.preference(config.trainer)
    return estimate.memory(config.model, par, layout, batch.micro_batch, dpo), batch.tokens_per_step


def test_dpo_counts_the_reference_model_and_twice_the_tokens():
    sft, sft_tokens = dpo_memory()
    dpo, dpo_tokens = dpo_memory(DPO)
    precomputed, _ = dpo_memory(DPO, "trainer.dpo.precompute_reference=true")
    lora, _ = dpo_memory(DPO, "model.lora.rank=16")
    assert dpo_tokens == 2 * sft_tokens
    assert sft.reference == precomputed.reference == lora.reference == 0
    # bf16 weights of 8.0 B parameters sharded over the 8 GPUs of a node (fsdp_hybrid)
    assert dpo.reference == pytest.approx(8.03e9 * 2 / 8, rel=0.01)
    assert dpo.activations == pytest.approx(2 * sft.activations, rel=0.01)
    assert dpo.logits == 2 * sft.logits
    assert sft.total < precomputed.total < dpo.total
