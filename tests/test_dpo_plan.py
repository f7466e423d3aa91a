"""trainer.objective=dpo in the plan: its options checked with the key and the fix, and the planner's memory
with the reference model and the pairs' doubled tokens."""

import pytest

from compiler.launch import summary
from compiler.planner import estimate
from compiler.planner.assumptions import RECOMPUTE_TIME
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.targets.records import RunRecord
from tests.helpers import plan_for
from tests.test_chat_templates import make_tokenizer
from tests.text_corpus import train_tokenizer, write_jsonl

DPO = "trainer.objective=dpo"
LLAMA_P5 = "experiment=llama3-8b-p5x4"
S3_PAIRS = ("data.format=preference", "data.tokenizer=s3://bucket/tokenizer")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[str, ...]:
    """Overrides reading a local folder of pairs with a tokenizer made here."""
    root = tmp_path_factory.mktemp("pairs")
    tokenizer = train_tokenizer(root / "tokenizer")
    write_jsonl(root / "data/train.jsonl", [{"prompt": "say: hi", "chosen": " hi.", "rejected": " hi!"}])
    return ("data=local", f"data.path={root / 'data'}", "data.format=preference", f"data.tokenizer={tokenizer}")


INVALID = [
    ([DPO, "trainer.dpo.beta=0"], "trainer.dpo.beta", "must be positive"),
    ([DPO, "trainer.dpo.loss=kto"], "trainer.dpo.loss", "Invalid value 'kto'"),
    ([DPO, "trainer.dpo.label_smoothing=0.5"], "trainer.dpo.label_smoothing", "must be in [0, 0.5)"),
    ([DPO, "trainer.dpo.label_smoothing=0.1"], "trainer.dpo.label_smoothing", "unused by loss=sigmoid"),
    (["trainer.dpo.beta=0.5"], "trainer.dpo", "only used with trainer.objective=dpo"),
    ([DPO], "data.format", "trains on preference pairs, not tokens"),
    (["PAIRS"], "data.format", "preference pairs train with trainer.objective=dpo"),
    (
        ["PAIRS", DPO, "trainer=script", "trainer.source_dir=src", "trainer.script=t.py"],
        "trainer.objective",
        "a user script trains as it is written",
    ),
    (["PAIRS", DPO, "data.loss_on=all"], "data.loss_on", "cover its completions only"),
    (["PAIRS", DPO, "data.packing_mask=true"], "data.packing_mask", "never packed"),
    (
        ["PAIRS", DPO, "parallelism.pp=2", "model.tied_embeddings=false", "parallelism.dp=-1"],
        "trainer.objective",
        "not supported with pipeline parallelism",
    ),
    (["PAIRS", DPO, "parallelism=zero3"], "model.lora.rank", "not built for zero3's partitions yet"),
    (["data.max_prompt_length=8"], "data.max_prompt_length", "cuts a preference pair's prompt"),
    (["PAIRS", DPO, "data.max_prompt_length=4096"], "data.max_prompt_length", "must leave the completion room"),
]


@pytest.mark.parametrize(("overrides", "key", "message"), INVALID, ids=[case[1] + ":" + case[2] for case in INVALID])
def test_invalid_dpo_config_names_key_and_fix(overrides, key, message, pairs):
    overrides = [o for override in overrides for o in (pairs if override == "PAIRS" else (override,))]
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    assert caught.value.key == key
    assert message in caught.value.one_line()


def test_a_dpo_plan_of_pairs_on_the_small_model(pairs):
    plan = plan_for(*pairs, DPO, "trainer.dpo.loss=ipo", "trainer.dpo.beta=0.3")
    assert plan.trainer.objective is schema.Objective.dpo and plan.trainer.dpo.loss is schema.DpoLoss.ipo
    assert plan.batch.tokens_per_step == 2 * plan.batch.global_batch * plan.model.seq_len
    assert plan.chat_date is not None  # message lists are rendered with the chat template, dated as chat is


def test_sft_stays_the_default_and_its_plan_holds_no_reference():
    plan = plan_for(LLAMA_P5)
    assert plan.trainer.objective is schema.Objective.sft
    assert plan.estimate.memory.reference == 0 and "reference" not in plan.estimate.memory.terms


def memory(*overrides: str) -> tuple[estimate.Memory, int]:
    """The planner's peak per GPU and tokens per step of Llama 3 8B on 4 × p5.48xlarge (fsdp_hybrid)."""
    plan = plan_for(LLAMA_P5, *overrides)
    return plan.estimate.memory, plan.batch.tokens_per_step


def test_dpo_counts_the_reference_model_and_twice_the_tokens():
    sft_speed = plan_for(LLAMA_P5).estimate.throughput
    dpo_speed = plan_for(LLAMA_P5, DPO, *S3_PAIRS, "trainer.dpo.precompute_reference=true").estimate.throughput
    assert dpo_speed.compute_seconds == pytest.approx(2 * sft_speed.compute_seconds)  # chosen and rejected rows
    assert dpo_speed.tokens_per_second == pytest.approx(sft_speed.tokens_per_second, rel=0.1)
    live = plan_for(LLAMA_P5, DPO, *S3_PAIRS).estimate.throughput  # the reference's forward pass: 2 of 6 FLOPs
    # the preset recomputes every layer (activation_checkpointing=full): the step's time over a plain one
    recompute = RECOMPUTE_TIME[schema.Checkpointing.full]
    assert live.compute_seconds == pytest.approx(dpo_speed.compute_seconds * (recompute + 1 / 3) / recompute)
    sft, sft_tokens = memory()
    dpo, dpo_tokens = memory(DPO, *S3_PAIRS)
    precomputed, _ = memory(DPO, *S3_PAIRS, "trainer.dpo.precompute_reference=true")
    assert dpo_tokens == 2 * sft_tokens
    assert sft.reference == precomputed.reference == 0
    # bf16 weights of 8.0 B parameters sharded over the 8 GPUs of a node (fsdp_hybrid)
    assert dpo.reference == pytest.approx(8.03e9 * 2 / 8, rel=0.01)
    ddp, _ = memory(DPO, *S3_PAIRS, "parallelism=ddp", "hardware.memory_check=false")
    assert ddp.reference == pytest.approx(8.03e9 * 4, rel=0.01)  # a copy of DDP's fp32 weights, under autocast
    assert dpo.activations == pytest.approx(2 * sft.activations, rel=0.01)
    assert dpo.logits == 2 * sft.logits
    assert sft.total < precomputed.total < dpo.total


def test_a_lora_dpo_plan_of_llama3_8b_on_p5_fits_beside_its_sft_plan(tmp_path):
    from transformers import LlamaConfig

    shape = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32)
    LlamaConfig(**shape, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192).save_pretrained(
        tmp_path
    )
    llama = (LLAMA_P5, "model=hf", f"model.path={tmp_path}", "model.init=random", "model.lora.rank=16")
    sft, dpo = plan_for(*llama), plan_for(*llama, DPO, *S3_PAIRS)
    assert dpo.batch.tokens_per_step == 2 * sft.batch.tokens_per_step
    assert dpo.estimate.memory.reference == 0  # the base model with the adapters disabled
    assert dpo.estimate.memory.activations == 2 * sft.estimate.memory.activations
    assert sft.estimate.memory.total < dpo.estimate.memory.total <= dpo.estimate.gpu_memory


def test_the_sweep_summary_shows_the_held_out_reward_accuracy(tmp_path):
    point = RunRecord(run_dir=str(tmp_path), status="completed", final={"loss": 0.5, "val_rewards/accuracy": 0.875})
    assert summary.row(point)["val_reward_accuracy"] == "0.875"
    assert summary.row(RunRecord(run_dir="b", status="completed", final={"loss": 4.0}))["val_reward_accuracy"] == ""


def test_message_pairs_render_with_the_chat_template_at_plan_time(tmp_path):
    tokenizer = make_tokenizer(tmp_path / "tokenizer", "gemma2")  # its template refuses a system message
    prompt = [{"role": "system", "content": "be brief."}, {"role": "user", "content": "say: hi"}]
    row = {"prompt": prompt, "chosen": [{"role": "assistant", "content": "hi."}]}
    write_jsonl(tmp_path / "data/train.jsonl", [row | {"rejected": [{"role": "assistant", "content": "hi!"}]}])
    data = ("data=local", f"data.path={tmp_path / 'data'}", "data.format=preference", f"data.tokenizer={tokenizer}")
    with pytest.raises(ConfigError, match="train.jsonl, record 1: the chat template raised") as caught:
        plan_for(*data, DPO, "model.vocab=512")
    assert caught.value.key == "data.path"
