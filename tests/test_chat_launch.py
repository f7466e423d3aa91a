"""`dockyard launch ... data.format=chat` on two local container nodes with Phi-4-mini's chat template (whose
renderings end with the end-of-text token, where prefix comparison found no reply): the validation loss
falls, and the run's token cache holds transformers' ids and exactly the replies with their `<|end|>`. Llama
3.2's template through the entrypoint alone: the final `<|eot_id|>`, its eos, is a target."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from compiler.launch import runs
from compiler.spec import Plan
from tests.entrypoint_support import tiny_plan, train
from tests.test_chat_templates import make_tokenizer, target_runs
from tests.text_corpus import conversations, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def test_phi4_mini_conversations_fine_tune_with_the_replies_as_targets(engine, tmp_path):
    tokenizer_folder = make_tokenizer(tmp_path / "tokenizer", "phi4-mini")
    records = [{"messages": c} for c in conversations(400)]
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", records[:320])
    write_jsonl(data / "held/val.jsonl", records[320:])
    command = [DOCKYARD, "launch", "experiment=smoke", "data=local", f"data.path={data}", "data.format=chat"]
    command += [f"data.tokenizer={tokenizer_folder}", "model.vocab=512", "data.validation=held"]
    command += ["hardware.processes_per_node=1", "trainer.steps=10", "trainer.eval_interval=5", "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    validation = {row["step"]: row["val_loss"] for row in runs.loss_curve(run_dir) if "val_loss" in row}
    assert list(validation) == [5, 10] and validation[10] < validation[5], validation

    plan = Plan.from_json((run_dir / "plan.json").read_text())
    assert plan.chat_date is not None
    (cache,) = (run_dir / "checkpoints" / "token-cache").iterdir()
    tokens, targets = np.load(cache / "train/tokens.npy"), np.load(cache / "train/targets.npy")
    starts = np.load(cache / "train/starts.npy")
    reference = AutoTokenizer.from_pretrained(tokenizer_folder)
    for number, record in enumerate(records[:20]):
        ids, flags = tokens[starts[number] : starts[number + 1]], targets[starts[number] : starts[number + 1]]
        assert ids.tolist() == reference.apply_chat_template(record["messages"], tokenize=True)["input_ids"]
        replies = [m["content"] + "<|end|>" for m in record["messages"] if m["role"] == "assistant"]
        assert target_runs(reference, ids, flags) == replies
    meta = json.loads((cache / "meta.json").read_text())["splits"]["train"]
    assert meta["documents"] == 320 and 0.05 < meta["targets"] / meta["tokens"] < 0.6


def test_llama32_single_turns_train_their_final_eot_id_through_the_entrypoint(tmp_path):
    """Llama 3.2's eos is its end-of-turn marker `<|eot_id|>`, so each one-turn conversation's rendering ends
    with it and nothing is appended: the token cache the entrypoint builds (2 ranks under torchrun) marks that
    last token as a target, the stop token the model must learn."""
    tokenizer_folder = make_tokenizer(tmp_path / "tokenizer", "llama3.2")
    records = [{"messages": c[-2:]} for c in conversations(80)]  # one user turn, one reply
    write_jsonl(tmp_path / "data" / "train.jsonl", records)
    data = ["data=local", f"data.path={tmp_path / 'data'}", "data.format=chat", f"data.tokenizer={tokenizer_folder}"]
    train(tiny_plan(*data, "model.vocab=512", "trainer.steps=2"), tmp_path / "root")
    (cache,) = (tmp_path / "root" / "checkpoints" / "token-cache").iterdir()
    tokens, targets = np.load(cache / "train/tokens.npy"), np.load(cache / "train/targets.npy")
    starts = np.load(cache / "train/starts.npy")
    reference = AutoTokenizer.from_pretrained(tokenizer_folder)
    eot = reference.convert_tokens_to_ids("<|eot_id|>")
    assert reference.eos_token_id == eot and len(starts) - 1 == len(records)
    for number, record in enumerate(records[:20]):
        ids, flags = tokens[starts[number] : starts[number + 1]], targets[starts[number] : starts[number + 1]]
        assert ids[-1] == eot and flags[-1] == 1, (ids.tolist(), flags.tolist())
        assert target_runs(reference, ids, flags) == [record["messages"][-1]["content"] + "<|eot_id|>"]
