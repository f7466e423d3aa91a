"""`dockyard convert`: a Trainer, TRL or axolotl recipe as overrides, refusing what dockyard cannot honour, and
the port of a `run_clm` recipe trained with the Trainer's own schedule and optimizer settings."""

import json

import torch
from transformers import TrainingArguments
from transformers.optimization import get_scheduler

from entrypoint.trainer.optim import lr_at
from tests.entrypoint_support import tiny_plan
from tests.hostile import invoke

RUN_CLM = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "learning_rate": 2e-4,
    "warmup_steps": 0.1,
    "weight_decay": 0.01,
    "lr_scheduler_type": "cosine",
    "logging_steps": 10,
    "save_steps": 200,
    "seed": 7,
    "report_to": "tensorboard",
}
"""A `run_clm.py` fine-tune's TrainingArguments (the rest left at the Trainer's defaults)."""


def refusals(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dockyard: cannot honour ")]


def test_a_run_clm_recipe_ports_and_trains_the_trainers_lr_curve(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path / "out"), **RUN_CLM)
    recipe = json.loads(args.to_json_string()) | {"model_name_or_path": "gpt2", "block_size": 64}
    (tmp_path / "args.json").write_text(json.dumps(recipe))
    outcome = invoke(["convert", "args.json"], tmp_path)
    assert (outcome.status, refusals(outcome.stderr), outcome.created) == (0, [], set())
    assert "dockyard: note: Trainer recipe: its defaults are stated where it leaves a setting out" in outcome.stderr
    overrides = outcome.stdout.split()
    assert overrides == [
        "trainer.lr=0.0002",
        "trainer.lr_schedule=cosine",
        "trainer.min_lr_ratio=0",
        "trainer.warmup_steps=0",
        "trainer.weight_decay=0.01",
        "trainer.adam_beta1=0.9",
        "trainer.adam_beta2=0.999",
        "trainer.adam_epsilon=1e-08",
        "trainer.grad_clip=1",
        "trainer.epochs=3",
        "parallelism.micro_batch=4",
        "parallelism.grad_accum=2",
        "trainer.warmup_ratio=0.1",
        "trainer.log_interval=10",
        "trainer.trackers=[jsonl,tensorboard]",
        "trainer.checkpoint_interval=200",
        "trainer.seed=7",
        "model=hf",
        "model.path=gpt2",
        "model.seq_len=64",
    ]
    # The tiny model stands in for the checkpoint: 3 epochs of 20,000 tokens at 1 × 2 × dp 2 × 64 tokens a step.
    ported = [o for o in overrides if not o.startswith(("model", "parallelism.micro_batch"))]
    plan = tiny_plan(*ported, "data.tokens=20000", "parallelism.micro_batch=1")
    steps = plan.trainer.steps
    assert steps == 235
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.get_warmup_steps(steps), steps)
    theirs = []
    for _ in range(steps):
        theirs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert [lr_at(step, plan.trainer, plan.derived) for step in range(steps)] == theirs


def test_what_dockyard_cannot_honour_is_refused_one_line_each(tmp_path):
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        optim="adafactor",
        label_smoothing_factor=0.1,
        lr_scheduler_type="polynomial",
        save_strategy="epoch",
    )
    (tmp_path / "args.json").write_text(args.to_json_string())
    outcome = invoke(["convert", "args.json"], tmp_path)
    assert outcome.status == 2
    assert refusals(outcome.stderr) == [
        "dockyard: cannot honour lr_scheduler_type: polynomial is not a schedule dockyard runs (linear, cosine, "
        "cosine_with_min_lr, constant, constant_with_warmup, warmup_stable_decay)",
        "dockyard: cannot honour optim: adafactor is not AdamW, the optimizer dockyard's trainer runs",
        "dockyard: cannot honour label_smoothing_factor: dockyard's loss has no label smoothing",
        "dockyard: cannot honour save_strategy: epoch with 500: dockyard counts in steps",
    ]
    assert "trainer.epochs=3" in outcome.stdout.split()  # what can be ported still is


def test_an_axolotl_config_ports(tmp_path):
    (tmp_path / "lora.yml").write_text(
        "base_model: /models/llama\nsequence_len: 1024\nsample_packing: true\nmicro_batch_size: 2\n"
        "gradient_accumulation_steps: 4\nnum_epochs: 2\nlearning_rate: 0.0002\nlr_scheduler: cosine\n"
        "cosine_min_lr_ratio: 0.1\nwarmup_ratio: 0.05\noptimizer: adamw_torch_fused\nbf16: auto\n"
        "gradient_checkpointing: true\nadapter: lora\nlora_r: 16\nlora_alpha: 32\nlora_dropout: 0.05\n"
        "datasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\nval_set_size: 0.05\noutput_dir: ./out\n"
        "special_tokens:\n  pad_token: <pad>\n"
    )
    outcome = invoke(["convert", "lora.yml"], tmp_path)
    assert outcome.status == 0, outcome.stderr
    overrides = dict(line.split("=", 1) for line in outcome.stdout.split())
    assert overrides["model.path"] == "/models/llama"
    expected = {
        "model": "hf",
        "model.seq_len": "1024",
        "data.packing": "true",
        "parallelism.grad_accum": "4",
        "trainer.epochs": "2",
        "trainer.lr_schedule": "cosine_with_min_lr",
        "trainer.min_lr_ratio": "0.1",
        "trainer.warmup_ratio": "0.05",
        "parallelism.mixed_precision": "bf16",
        "parallelism.activation_checkpointing": "full",
        "model.lora.rank": "16",
        "model.lora.alpha": "32",
        "data.validation": "0.05",
        "data": "hf",  # the Hub dataset, ported: its alpaca rows read as chat (data=hf's format)
        "data.name": "tatsu-lab/alpaca",
    }
    assert expected.items() <= overrides.items()
    assert refusals(outcome.stderr) == []  # the pad token changes nothing trained: padding is masked out of the loss
    assert outcome.stderr.splitlines()[-1] == "dockyard: ignored (what it trains is unchanged): output_dir"


def test_a_value_of_the_wrong_kind_is_refused_in_one_line(tmp_path):
    (tmp_path / "sft.yaml").write_text("learning_rate: fast\nmax_length: 512\n")
    outcome = invoke(["convert", "sft.yaml"], tmp_path)
    assert outcome.status == 2
    assert "model.seq_len=512" in outcome.stdout.split()
    assert refusals(outcome.stderr) == [
        "dockyard: cannot honour learning_rate: 'fast' is not a value dockyard can read for it"
    ]


def test_a_recipe_that_is_not_a_mapping_is_one_line(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    outcome = invoke(["convert", "list.yaml"], tmp_path)
    assert outcome.status == 2
    assert outcome.stderr.strip() == (
        "dockyard: error: recipe: list.yaml holds no mapping of settings; give a JSON or YAML file of key: value"
    )
    assert invoke(["convert", "a.json", "b.json"], tmp_path).stderr.startswith("dockyard: error: usage: ")
    assert invoke(["convert", "--help"], tmp_path).stdout.startswith("usage: dockyard convert RECIPE")
