"""Fine-tuning a Hugging Face checkpoint end to end on two local container nodes: LoRA under FSDP2 from a
folder with a tokenizer (and its chat template), on a `data.mixture` of two dataset folders (half of one of alpaca
rows, all of one of ShareGPT conversations) with the loss on the replies only, packed with document-boundary
masking, exported as a folder transformers and peft load (the merged model equals the base with the adapter
applied by peft), and a second run continuing from that export."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from compiler.launch import runs
from compiler.spec import Plan
from tests.entrypoint_support import tiny_plan, train
from tests.helpers import unconstrained_packages
from tests.pretrained import save_checkpoint
from tests.text_corpus import conversations, sentences, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
MERGED_TOLERANCE = 1e-5
"""The merged export against base + adapter in peft, fp32 logits of about 5 (the merge adds B·A once)."""


def logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=tokens).logits


ALPACA_ROWS, ALPACA_SHARE, SHAREGPT_ROWS = 240, 0.5, 180
"""The mixture: the first half of an alpaca folder's rows, then every conversation of a ShareGPT folder."""
SHAREGPT_NAMES = {"system": "system", "user": "human", "assistant": "gpt"}
SHAREGPT_ROLE = {name: role for role, name in SHAREGPT_NAMES.items()}


def mixture_folders(root: Path) -> tuple[Path, Path, list[dict], list[dict]]:
    """An alpaca folder and a ShareGPT folder of JSON lines, as `load_dataset` reads a local folder, with their
    rows."""
    said = sentences(ALPACA_ROWS, seed=11)
    alpaca = [{"instruction": f"say: {text}", "input": "", "output": text} for text in said]
    sharegpt = [
        {"conversations": [{"from": SHAREGPT_NAMES[m["role"]], "value": m["content"]} for m in talk]}
        for talk in conversations(SHAREGPT_ROWS)
    ]
    first = write_jsonl(root / "alpaca" / "train.jsonl", alpaca).parent
    second = write_jsonl(root / "sharegpt" / "train.jsonl", sharegpt).parent
    return first, second, alpaca, sharegpt


def test_lora_fine_tunes_a_checkpoint_on_a_mixture_into_an_export_transformers_and_peft_load(
    engine, tmp_path, hf_tokenizer
):
    checkpoint = save_checkpoint(tmp_path / "llama", "llama", vocab=512)  # writes files the containers read
    for file in hf_tokenizer.iterdir():  # the checkpoint's own tokenizer, with a chat template
        shutil.copy(file, checkpoint / file.name)
    alpaca, sharegpt, alpaca_rows, sharegpt_rows = mixture_folders(tmp_path / "data")
    mixture = f"data.mixture=[{{name: '{alpaca}', weight: {ALPACA_SHARE}}}, {{name: '{sharegpt}'}}]"
    command = [DOCKYARD, "launch", "experiment=smoke", "model=hf", f"model.path={checkpoint}", "model.lora.rank=8"]
    command += ["data=hf", mixture, "data.packing_mask=true"]
    command += ["hardware.processes_per_node=1", "parallelism=fsdp", "trainer.steps=8", "trainer.lr=1e-2"]
    command += ["trainer.log_interval=2", "trainer.checkpoint_interval=4", "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    image = json.loads((run_dir / "image.json").read_text())["reference"]
    freeze = engine.containers.run(image, ["pip", "freeze"], entrypoint=[], remove=True, network_mode="none")
    assert unconstrained_packages(freeze.decode(), Plan.from_json((run_dir / "plan.json").read_text())) == []
    output = result.stdout + result.stderr
    assert "attention inside documents" in output, output[-3000:]
    masked = float(output.split("loss on           assistant tokens: ")[1].split("%")[0])
    assert 40 < masked < 90  # prompts, system lines and the template's separators are no targets
    losses = [row["loss"] for row in runs.loss_curve(run_dir)]
    assert losses[-1] < losses[0]
    assert_both_sources_were_read(run_dir, checkpoint, alpaca_rows, sharegpt_rows)

    export = run_dir / "model"
    tokenizer = AutoTokenizer.from_pretrained(export)
    tokens = torch.tensor([tokenizer("the 12th run trains 5 models")["input_ids"]])
    merged = AutoModelForCausalLM.from_pretrained(export)
    base = AutoModelForCausalLM.from_pretrained(checkpoint)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(checkpoint), export / "adapter")
    torch.testing.assert_close(logits(merged, tokens), logits(adapted, tokens), atol=MERGED_TOLERANCE, rtol=0)
    assert not torch.allclose(logits(merged, tokens), logits(base, tokens), atol=1e-3)  # the adapters trained

    plan = tiny_plan(
        "model=hf", f"model.path={export}", "hardware.processes_per_node=1", "trainer.steps=2", "trainer.warmup_steps=1"
    )
    continued = train(plan, tmp_path / "continued")
    assert [row["step"] for row in continued] == [1, 2]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "continued/model").config.model_type == "llama"


def assert_both_sources_were_read(run_dir: Path, tokenizer_folder: Path, alpaca: list[dict], sharegpt: list[dict]):
    """The run's token cache holds the mixture in its order: the alpaca share (prompt and output as text), then
    every ShareGPT conversation (rendered by the chat template, human and gpt as user and assistant)."""
    (cache,) = (run_dir / "checkpoints" / "token-cache").iterdir()
    meta = json.loads((cache / "meta.json").read_text())["splits"]["train"]
    kept = int(ALPACA_ROWS * ALPACA_SHARE)
    assert meta["documents"] == kept + SHAREGPT_ROWS
    tokens, starts = np.load(cache / "train/tokens.npy"), np.load(cache / "train/starts.npy")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)

    def text(document: int) -> str:
        return tokenizer.decode(tokens[starts[document] : starts[document + 1]].tolist())

    assert f"### Instruction:\n{alpaca[0]['instruction']}" in text(0) and alpaca[0]["output"] in text(0)
    assert alpaca[kept - 1]["output"] in text(kept - 1) and "### Instruction" not in text(kept)
    first_talk = sharegpt[0]["conversations"]
    assert all(turn["value"] in text(kept) for turn in first_talk)
    messages = [{"role": SHAREGPT_ROLE[turn["from"]], "content": turn["value"]} for turn in first_talk]
    rendered = tokenizer.apply_chat_template(messages, tokenize=True)["input_ids"]
    assert tokens[starts[kept] : starts[kept] + len(rendered)].tolist() == rendered
