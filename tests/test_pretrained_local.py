"""Fine-tuning a Hugging Face checkpoint end to end on two local container nodes: LoRA under FSDP2 from a
folder with a tokenizer (and its chat template), on conversations with the loss on the assistant's tokens only,
packed with document-boundary masking, exported as a folder transformers and peft load (the merged model equals
the base with the adapter applied by peft), and a second run continuing from that export."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from compiler.launch import runs
from compiler.spec import Plan
from tests.entrypoint_support import tiny_plan, train
from tests.helpers import unconstrained_packages
from tests.pretrained import save_checkpoint
from tests.text_corpus import conversations, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
MERGED_TOLERANCE = 1e-5
"""The merged export against base + adapter in peft, fp32 logits of about 5 (the merge adds B·A once)."""


def logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=tokens).logits


def test_lora_fine_tunes_a_checkpoint_on_conversations_into_an_export_transformers_and_peft_load(
    engine, tmp_path, hf_tokenizer
):
    checkpoint = save_checkpoint(tmp_path / "llama", "llama", vocab=512)  # writes files the containers read
    for file in hf_tokenizer.iterdir():  # the checkpoint's own tokenizer, with a chat template
        shutil.copy(file, checkpoint / file.name)
    data = write_jsonl(tmp_path / "data/train.jsonl", [{"messages": c} for c in conversations(300)]).parent
    command = [DOCKYARD, "launch", "experiment=smoke", "model=hf", f"model.path={checkpoint}", "model.lora.rank=8"]
    command += ["data=local", f"data.path={data}", "data.format=chat", "data.packing_mask=true"]
    command += ["parallelism=fsdp", "trainer.steps=8", "trainer.lr=1e-2", "trainer.log_interval=2"]
    command += ["trainer.checkpoint_interval=4", "hydra.run.dir=run"]
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

    export = run_dir / "model"
    tokenizer = AutoTokenizer.from_pretrained(export)
    tokens = torch.tensor([tokenizer("the 12th run trains 5 models")["input_ids"]])
    merged = AutoModelForCausalLM.from_pretrained(export)
    base = AutoModelForCausalLM.from_pretrained(checkpoint)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(checkpoint), export / "adapter")
    torch.testing.assert_close(logits(merged, tokens), logits(adapted, tokens), atol=MERGED_TOLERANCE, rtol=0)
    assert not torch.allclose(logits(merged, tokens), logits(base, tokens), atol=1e-3)  # the adapters trained

    plan = tiny_plan("model=hf", f"model.path={export}", "trainer.steps=2", "trainer.warmup_steps=1")
    continued = train(plan, tmp_path / "continued")
    assert [row["step"] for row in continued] == [1, 2]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "continued/model").config.model_type == "llama"
