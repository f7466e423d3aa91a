"""`dockyard launch ... data.format=preference trainer.objective=dpo` with LoRA on two local container nodes: on
pairs whose chosen answers follow a rule the rejected ones break (a sentence ends with a period, not an
exclamation mark), the held-out pairs' reward accuracy rises from 0 (the policy starts as its reference) to
well above 0.5; the token cache holds each pair as two documents whose targets are the completions."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from compiler.launch import runs
from tests.pretrained import save_checkpoint
from tests.text_corpus import sentences, train_tokenizer, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
SEQ_LEN = 32


def pair(sentence: str) -> dict:
    said = sentence.rstrip(".")
    return {"prompt": f"say: {said}\n", "chosen": f"{said}.", "rejected": f"{said}!"}


def test_dpo_with_lora_prefers_the_chosen_answers_of_held_out_pairs(engine, tmp_path):
    model = save_checkpoint(tmp_path / "model", "llama", vocab=512)
    train_tokenizer(model)
    pairs = [pair(s) for s in sentences(200, seed=7)]
    too_long = [{**pairs[n], "prompt": "say: " + " ".join(sentences(8, seed=n)) + "\n"} for n in range(2)]
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", too_long + pairs[:160])
    write_jsonl(data / "held/val.jsonl", pairs[160:])
    command = [DOCKYARD, "launch", "experiment=smoke", "model=hf", f"model.path={model}", "model.lora.rank=8"]
    command += ["data=local", "data.format=preference", f"data.path={data}", "trainer.objective=dpo"]
    command += ["data.validation=held", f"model.seq_len={SEQ_LEN}", "trainer.steps=10", "trainer.eval_interval=5"]
    command += ["hardware.processes_per_node=1", "trainer.lr=1e-2", "trainer.checkpoint_interval=0"]
    command += ["hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert f"truncated         2 pairs longer than seq_len {SEQ_LEN} + 1" in output
    assert "batch             8 pairs = micro 4 × accum 1 × dp 2" in output

    run_dir = tmp_path / "run"
    records = runs.loss_curve(run_dir)
    first = records[0]
    assert first["rewards/margin"] == 0 and first["rewards/accuracy"] == 0  # the policy starts as its reference
    held = {row["step"]: row for row in records if "val_rewards/accuracy" in row}
    assert list(held) == [5, 10]
    assert held[10]["val_rewards/accuracy"] >= 0.9, held
    assert held[5]["val_rewards/margin"] > 0.05 and held[10]["val_rewards/margin"] > 0.05
    assert held[10]["val_loss"] < np.log(2)
    assert (run_dir / "model" / "adapter" / "adapter_model.safetensors").is_file()  # the policy's export, as SFT's

    (cache,) = (run_dir / "checkpoints" / "token-cache").iterdir()
    tokens, targets = np.load(cache / "train/tokens.npy"), np.load(cache / "train/targets.npy")
    starts = np.load(cache / "train/starts.npy")
    tokenizer = AutoTokenizer.from_pretrained(model)
    for number, record in enumerate(pairs[:5], start=len(too_long)):
        for document, completion in ((2 * number, record["chosen"]), (2 * number + 1, record["rejected"])):
            ids = tokens[starts[document] : starts[document + 1]]
            flags = targets[starts[document] : starts[document + 1]].astype(bool)
            assert tokenizer.decode(ids) == record["prompt"] + completion + tokenizer.eos_token
            assert tokenizer.decode(ids[flags]) == completion + tokenizer.eos_token  # TRL appends it to text pairs
    meta = json.loads((cache / "meta.json").read_text())["splits"]
    assert meta["train"]["documents"] == 2 * 162 and meta["validation"]["documents"] == 2 * 40
