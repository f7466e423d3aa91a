"""Real recipes (tests/data/recipes: the alignment-handbook's, axolotl's, TRL's) through `dockyard convert`: each
key ported or ignored as neutral, and every kept recipe converting with exit status 0; the tools' defaults stated;
the DPO, LoRA and Phi-3 cases; then each port planned and dry-run on tiny fixture checkpoints and data."""

import json
import math
from pathlib import Path

import pytest

from compiler.config.compose import compose_config
from compiler.config.recipe_keys import DATA_KEYS, NEUTRAL
from compiler.config.recipes import convert, read_recipe
from compiler.spec.errors import ConfigError
from tests.entrypoint_support import train
from tests.helpers import plan_for
from tests.hostile import invoke
from tests.pretrained import save_checkpoint
from tests.text_corpus import conversations, sentences, train_tokenizer, write_jsonl

RECIPES = Path(__file__).parent / "data" / "recipes"

KEPT = sorted(path.name for path in RECIPES.glob("*.y*ml"))


DATASETS = {
    "handbook-smollm2-sft.yaml": ("data.name", "HuggingFaceTB/smoltalk"),
    "axolotl-llama-3-lora-1b.yml": ("data.name", "teknium/GPT4-LLM-Cleaned"),
    "trl-cli-example_config.yaml": ("data.name", "stanfordnlp/imdb"),
    "handbook-zephyr-7b-beta-dpo_qlora.yaml": ("data.split", "train_prefs"),
    "handbook-smollm2-dpo.yaml": (
        "data.mixture",
        "[{name: 'HuggingFaceH4/ultrafeedback_binarized', config: 'default', split: 'train_prefs'}, "
        "{name: 'HuggingFaceH4/ultrafeedback_binarized', config: 'default', split: 'test_prefs'}]",
    ),
}
"""The Hub datasets some recipes name, as their ports give them to `data=hf`."""


def test_every_kept_recipe_is_listed_with_its_source():
    assert len(KEPT) == 14
    readme = (RECIPES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in KEPT)


@pytest.mark.parametrize("name", KEPT)
def test_each_key_is_ported_or_ignored_and_the_recipe_converts(name, tmp_path):
    outcome = invoke(["convert", str(RECIPES / name)], tmp_path)
    assert not [line for line in outcome.stderr.splitlines() if line.startswith("dockyard: cannot honour ")]
    assert outcome.status == 0 and outcome.created == set(), outcome.stderr
    ignored_line = [line for line in outcome.stderr.splitlines() if line.startswith("dockyard: ignored")]
    ignored = ignored_line[0].split(": ", 2)[2].split(", ") if ignored_line else []
    assert len(ignored_line) <= 1 and set(ignored) <= NEUTRAL
    assert set(ignored) <= set(read_recipe(RECIPES / name)) and not set(ignored) & DATA_KEYS
    if name in DATASETS:
        key, value = DATASETS[name]
        assert f"{key}={value}" in outcome.stdout.splitlines() and "data=hf" in outcome.stdout.splitlines()


def ported(name: str) -> dict[str, str]:
    return {
        key: str(value) for key, value in (line.split("=", 1) for line in convert(read_recipe(RECIPES / name)).lines())
    }


def test_trl_defaults_are_stated_where_a_recipe_is_silent():
    """TRL's SFT example sets only the lr and schedule: TRL does not pack, puts the loss on every token, runs 3
    epochs of batch 8 at max_length 1024."""
    overrides = ported("trl-cli-example_config.yaml")
    assert overrides | {"model.path": "-"} == {
        "trainer.lr": "0.0001",
        "trainer.lr_schedule": "cosine",
        "trainer.min_lr_ratio": "0",
        "trainer.warmup_steps": "0",
        "trainer.weight_decay": "0",
        "trainer.adam_beta1": "0.9",
        "trainer.adam_beta2": "0.999",
        "trainer.adam_epsilon": "1e-08",
        "trainer.grad_clip": "1",
        "trainer.epochs": "3",
        "parallelism.micro_batch": "8",
        "parallelism.grad_accum": "1",
        "model.seq_len": "1024",
        "data.packing": "false",
        "data.loss_on": "all",
        "model": "hf",
        "model.path": "-",
        "trainer.trackers": "[jsonl]",
        "data": "hf",
        "data.name": "stanfordnlp/imdb",
    }


def test_dpo_recipes_port_as_dpo_with_their_beta():
    handbook = ported("handbook-zephyr-7b-beta-dpo_full.yaml")
    assert (handbook["trainer.objective"], handbook["trainer.dpo.beta"]) == ("dpo", "0.01")
    assert handbook["data.max_prompt_length"] == "512"
    assert (handbook["data.format"], handbook["model.seq_len"], handbook["trainer.lr"]) == (
        "preference",
        "1024",
        "5e-07",
    )
    axolotl = ported("axolotl-qwen2-dpo.yaml")
    assert (axolotl["trainer.objective"], axolotl["trainer.dpo.beta"]) == ("dpo", "0.1")  # rl_beta unset: TRL's
    assert (axolotl["trainer.epochs"], axolotl["parallelism.micro_batch"], axolotl["data.packing"]) == (
        "4",
        "2",
        "false",
    )


def test_lora_recipes_keep_their_adapters():
    zephyr = ported("handbook-zephyr-7b-beta-sft_qlora.yaml")  # use_peft on a 4-bit base: QLoRA, TRL's defaults
    assert (zephyr["model.lora.rank"], zephyr["model.lora.alpha"], zephyr["model.lora.dropout"]) == ("16", "16", "0.05")
    assert (zephyr["model.lora.quantize_base"], zephyr["model.lora.double_quant"]) == ("nf4", "false")
    gemma = ported("axolotl-gemma3-gemma-3-1b-qlora.yml")  # adapter: qlora, axolotl's double quantization
    assert (gemma["model.lora.quantize_base"], gemma["model.lora.double_quant"]) == ("nf4", "true")
    # its unfrozen_parameters, which axolotl does not support beside an adapter, are left out with a note
    assert "model.trainable_parameters" not in gemma
    notes = convert(read_recipe(RECIPES / "axolotl-gemma3-gemma-3-1b-qlora.yml")).notes
    assert any(note.startswith("unfrozen_parameters: left out under adapter: qlora") for note in notes)
    assert ported("axolotl-llama-3-instruct-dpo-lora-8b.yml")["model.lora.quantize_base"] == "int8"  # load_in_8bit
    assert zephyr["model.lora.targets"] == "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
    llama = ported("axolotl-llama-3-lora-1b.yml")
    assert (llama["model.lora.rank"], llama["model.lora.alpha"], llama["data.packing_mask"]) == ("16", "32", "true")
    assert llama["data.packing_strategy"] == "bfd"  # sample_packing: whole samples, as axolotl's multipack
    phi3 = ported("axolotl-phi-phi3-ft.yml")  # lora_target_linear: every linear layer, qkv_proj included
    assert (phi3["model.lora.rank"], phi3["model.lora.targets"]) == ("64", "[all-linear]")
    full = ported("axolotl-llama-3-fft-8b.yaml")  # no adapter: a full fine-tune
    assert not any(key.startswith("model.lora") for key in full)


def test_messages_name_the_recipes_own_keys(tmp_path):
    lines = invoke(["convert", str(RECIPES / "handbook-zephyr-7b-beta-dpo_qlora.yaml")], tmp_path).stderr
    assert "paged_adamw_32bit" not in lines  # AdamW with 32-bit state: ported, nothing to say
    (tmp_path / "a.yml").write_text("base_model: m\noptimizer: lion\nlr_scheduler: polynomial\nadapter:\n")
    lines = invoke(["convert", "a.yml"], tmp_path).stderr.splitlines()
    assert "dockyard: cannot honour optimizer: lion is not AdamW, the optimizer dockyard's trainer runs" in lines
    assert any(line.startswith("dockyard: cannot honour lr_scheduler: polynomial") for line in lines)
    assert not any("adapter" in line for line in lines)  # blank: a full fine-tune
    notes = invoke(["convert", str(RECIPES / "axolotl-llama-3-lora-1b.yml")], tmp_path).stderr
    assert "dockyard: note: optimizer: adamw_8bit keeps AdamW's two moments in 8 bits" in notes


def test_a_transformers_4_trainer_json_ports_its_defaults_as_neutral(tmp_path):
    """Keys transformers 4.x wrote with their defaults into every saved TrainingArguments."""
    saved = {
        "output_dir": "out",
        "evaluation_strategy": "steps",
        "eval_steps": 50,
        "fp16_opt_level": "O1",
        "half_precision_backend": "auto",
        "past_index": -1,
        "ray_scope": "last",
        "fsdp": [],
        "fsdp_config": {"min_num_params": 0, "xla": False, "xla_fsdp_grad_ckpt": False},
        "seed": 42,
        "data_seed": 42,
        "optim": "adamw_torch",
        "learning_rate": 1e-4,
        "fp16_backend": "auto",
        "mp_parameters": "",
        "_n_gpu": 1,
    }
    conversion = convert(saved)
    assert conversion.refused == []
    assert ("trainer.eval_interval", 50) in conversion.overrides.items()
    assert conversion.overrides["trainer.epochs"] == 3.0 and conversion.overrides["parallelism.micro_batch"] == 8
    assert convert(saved | {"data_seed": 7, "past_index": 0}).refused == [
        "past_index: dockyard's models carry no memory between batches",
        "data_seed: dockyard's data order follows trainer.seed; give data_seed the seed's value or remove it",
    ]


ARCHITECTURE = {
    "axolotl-qwen2-dpo.yaml": "qwen2",
    "axolotl-phi-phi3-ft.yml": "phi3",
    "handbook-zephyr-7b-beta-dpo_qlora.yaml": "llama-wide",
}
"""The recipes' models in the fixtures' architectures (llama for the Llama, Mistral and SmolLM ones; llama-wide
where the recipe's LoRA rank, 128, exceeds the tiny llama's narrowest projection, its 32-wide k_proj)."""
WIDE = dict(hidden_size=256, intermediate_size=256)
"""The llama-wide fixture's shape: 4 heads of 64 and 2 KV heads, so that k_proj and v_proj are 128 wide."""


DATA = {
    "axolotl-llama-3-lora-1b.yml": "alpaca",
    "axolotl-llama-3-fft-8b.yaml": "alpaca",
    "axolotl-phi-phi3-ft.yml": "alpaca",
    "axolotl-gemma3-gemma-3-1b-qlora.yml": "sharegpt",
    "handbook-zephyr-7b-beta-dpo_full.yaml": "ultrafeedback",
    "handbook-zephyr-7b-beta-dpo_qlora.yaml": "ultrafeedback",
    "handbook-smollm2-dpo.yaml": "ultrafeedback",
    "axolotl-qwen2-dpo.yaml": "conversation-pairs",
    "axolotl-llama-3-instruct-dpo-lora-8b.yml": "conversation-pairs",
}
"""Fixture data in the row shape each recipe's dataset has (conversations, or pairs with a prompt, otherwise):
alpaca's instruction/input/output, ShareGPT's from/value, UltraFeedback's chosen and rejected conversations,
and fozziethebeat/alpaca_messages_2k_dpo_test's `conversation` prompt with one `chosen` and one `rejected`
message (axolotl's `chat_template.default` DPO rows, which its recipes read with `field_messages`)."""
TOKENIZER = {"axolotl-llama-3-instruct-dpo-lora-8b.yml": "eot-tokenizer"}
"""The fixture tokenizer that stands in for a recipe's where the recipe names one of its tokens (Llama 3's
`<|eot_id|>` as `eos_token`)."""


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints, a chat tokenizer, and a folder of rows of each shape."""
    root = tmp_path_factory.mktemp("recipe-fixtures")
    found = {arch: save_checkpoint(root / arch, arch, vocab=512) for arch in ("llama", "qwen2", "phi3")}
    found["llama-wide"] = save_checkpoint(root / "llama-wide", "llama", vocab=512, **WIDE)
    found["tokenizer"] = train_tokenizer(root / "tokenizer")
    found["eot-tokenizer"] = with_token(train_tokenizer(root / "eot-tokenizer", vocab=511), "<|eot_id|>")
    said = sentences(240, seed=3)
    talks = conversations(60)
    shapes = {
        "chat": [{"messages": talk} for talk in talks],
        "alpaca": [
            {"instruction": said[3 * i], "input": said[3 * i + 1], "output": said[3 * i + 2]} for i in range(80)
        ],
        "sharegpt": [
            {
                "conversations": [
                    {"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]}
                    for m in talk
                    if m["role"] in ("user", "assistant")
                ]
            }
            for talk in talks
        ],
        "pairs": [
            {"prompt": talk[:-1], "chosen": talk[-1:], "rejected": [{"role": "assistant", "content": said[i]}]}
            for i, talk in enumerate(talks)
            if talk[-1]["role"] == "assistant"
        ],
    }
    shapes["conversation-pairs"] = [
        {"conversation": pair["prompt"], "chosen": pair["chosen"][0], "rejected": pair["rejected"][0]}
        for pair in shapes["pairs"]
    ]
    shapes["ultrafeedback"] = [
        {"chosen": pair["prompt"] + pair["chosen"], "rejected": pair["prompt"] + pair["rejected"]}
        for pair in shapes["pairs"]
    ]
    for shape, rows in shapes.items():
        found[shape] = write_jsonl(root / shape / "train.jsonl", rows).parent
    return found


def with_token(folder: Path, token: str) -> Path:
    """The tokenizer in `folder` with one more special token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"additional_special_tokens": [token]})
    tokenizer.save_pretrained(str(folder))
    return folder


HUB_KEYS = ("data.name", "data.config", "data.split", "data.mixture")
"""The recipe's Hub datasets, which the fixture folder replaces."""


def port(name: str, fixtures: dict[str, Path], **changes: str) -> list[str]:
    """The recipe's overrides, its checkpoint and datasets replaced by the fixtures' (a folder `load_dataset` reads,
    and small shapes)."""
    overrides = {key: value for key, value in ported(name).items() if key not in HUB_KEYS}
    dpo = overrides.get("trainer.objective") == "dpo"
    overrides |= {
        "model.path": str(fixtures[ARCHITECTURE.get(name, "llama")]),
        "model.seq_len": "64",
        "data": "hf",
        "data.name": str(fixtures[DATA.get(name, "pairs" if dpo else "chat")]),
        "data.format": "preference" if dpo else "chat",
        "data.tokenizer": str(fixtures[TOKENIZER.get(name, "tokenizer")]),
        "data.tokens": "20000",
        "data.validation": "0.25",
        "parallelism.micro_batch": "1",
    } | changes
    if "data.max_prompt_length" in overrides:  # the recipe's 512 of 1024, at the fixtures' 64
        overrides["data.max_prompt_length"] = "32"
    if ported(name).get("data.validation", "0.").isdigit():  # rows held out (2000): a few of the fixture's
        overrides["data.validation"] = "5"
    return [f"{key}={value}" for key, value in overrides.items()]


@pytest.mark.parametrize("name", KEPT)
def test_each_port_plans_and_dry_runs_on_the_fixtures(name, fixtures, tmp_path):
    """The dry run plans (its summary on stderr), then renders the request it would send."""
    dry_run = invoke(["launch", "--dry-run", *port(name, fixtures)], tmp_path)
    assert dry_run.status == 0, dry_run.stderr
    summary = dry_run.stderr
    recipe = ported(name)
    assert f"objective {recipe.get('trainer.objective', 'sft')}" in summary
    if "data.max_prompt_length" in recipe:
        assert "prompts cut to their last 32 tokens" in summary
    if "model.lora.rank" in recipe:
        assert f"adapters  LoRA rank {recipe['model.lora.rank']}" in summary
    if "model.lora.quantize_base" in recipe:
        assert f"held {recipe['model.lora.quantize_base']} (QLoRA)" in summary


def test_phi3s_all_linear_adapts_its_fused_qkv_proj(fixtures):
    config = compose_config(port("axolotl-phi-phi3-ft.yml", fixtures))
    assert (config.model.architecture, config.model.lora.targets) == (
        "phi3",
        ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"],
    )


def test_lora_targets_are_checked_against_the_checkpoints_tensors(fixtures):
    """Llama's default names on Phi-3, whose attention projection is one fused qkv_proj: only o_proj would
    be adapted, so the plan refuses, naming the checkpoint's linear layers."""
    overrides = port("axolotl-phi-phi3-ft.yml", fixtures, **{"model.lora.targets": "[q_proj,v_proj]"})
    with pytest.raises(ConfigError) as caught:
        compose_config(overrides)
    assert caught.value.key == "model.lora.targets"
    assert "'q_proj' names no module of" in caught.value.one_line()
    assert "choose among down_proj, gate_up_proj, o_proj, qkv_proj, or [all-linear]" in caught.value.one_line()


@pytest.mark.torchrun
def test_the_phi3_recipe_trains_adapters_on_its_fused_projections(fixtures, tmp_path):
    """axolotl's Phi-3 LoRA recipe, ported, trains on two ranks on alpaca rows: its adapters exported on
    qkv_proj, gate_up_proj, o_proj and down_proj."""
    changes = {"hardware.nodes": "1", "data.tokens": "384", "parallelism.mixed_precision": "fp32"}
    records = train(plan_for(*port("axolotl-phi-phi3-ft.yml", fixtures, **changes)), tmp_path)
    assert [row["step"] for row in records if "loss" in row][-1] == 3
    adapter = json.loads((tmp_path / "model/adapter/adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]
    assert adapter["r"] == 64


@pytest.mark.torchrun
def test_the_zephyr_dpo_recipe_trains_on_pairs_with_an_implicit_prompt(fixtures, tmp_path):
    """The alignment-handbook's Zephyr DPO recipe, ported, trains on two ranks on UltraFeedback-shaped rows
    (chosen and rejected conversations, the prompt implicit): its first loss is DPO's at a policy equal to its
    reference, -log σ(0) = ln 2."""
    changes = {"hardware.nodes": "1", "data.tokens": "1536", "parallelism.mixed_precision": "fp32"}
    records = train(plan_for(*port("handbook-zephyr-7b-beta-dpo_full.yaml", fixtures, **changes)), tmp_path)
    losses = [row for row in records if "loss" in row]
    assert losses[-1]["step"] == 3
    assert losses[0]["step_loss"] == pytest.approx(math.log(2), abs=1e-4)
