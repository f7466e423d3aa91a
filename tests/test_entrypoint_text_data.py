"""Documents and conversations through the real entrypoint and torchrun (2 CPU processes, gloo): every file
format trains with a validation loss that falls, and a run resumed from the checkpoint a stopped run leaves
reuses the token cache and sees exactly the batches of the uninterrupted run, for text, chat and preference
pairs."""

import pytest

from tests.entrypoint_support import (
    RERUN_TOLERANCE,
    entrypoint_env,
    losses,
    metrics,
    start_entrypoint,
    stopped_at,
    tiny_plan,
    write_plan,
)
from tests.text_corpus import conversations, documents, sentences, write_dataset, write_jsonl, write_parquet

pytestmark = pytest.mark.torchrun


def run(plan, root, **env) -> tuple[str, list[dict]]:
    """The entrypoint's output and the metrics records after a run that succeeded."""
    process = start_entrypoint(write_plan(plan, root), entrypoint_env(root, **env))
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output[-4000:]
    return output, metrics(root)


def document_plan(folder, tokenizer, fmt, *overrides):
    return tiny_plan(
        "data=local",
        f"data.path={folder}",
        f"data.format={fmt}",
        f"data.tokenizer={tokenizer}",
        "model.vocab=512",
        "data.validation=0.2",
        "trainer.eval_interval=3",
        *overrides,
    )


def test_every_format_trains_and_the_validation_loss_falls(tmp_path, hf_tokenizer):
    """JSONL, .jsonl.gz, .jsonl.zst, Parquet, a save_to_disk folder and .txt files in one data folder."""
    data, docs = tmp_path / "data", documents(600)
    rows = [{"text": doc} for doc in docs]
    write_jsonl(data / "a.jsonl", rows[:100])
    write_jsonl(data / "b.jsonl.gz", rows[100:200])
    write_jsonl(data / "c.jsonl.zst", rows[200:300])
    write_parquet(data / "d.parquet", rows[300:400])
    write_dataset(data / "e", rows[400:590])
    for index, doc in enumerate(docs[590:]):
        (data / f"f{index}.txt").write_text(doc)
    plan = document_plan(data, hf_tokenizer, "text", "trainer.steps=10", "trainer.eval_interval=5")
    output, records = run(plan, tmp_path / "root")
    trained = int(output.split("documents         ")[1].split(" training")[0])
    held_out = int(output.split("validation        ")[1].split(" documents")[0])
    assert trained + held_out == 600 and 60 < held_out < 180
    assert "packing           " in output and "efficiency" in output
    validation = {r["step"]: r["val_loss"] for r in records if "val_loss" in r}
    assert list(validation) == [5, 10]
    assert validation[10] < validation[5] - 0.1, validation


@pytest.mark.parametrize("fmt", ["text", "chat", "preference"])
def test_resume_equals_uninterrupted_and_reuses_the_cache(tmp_path, hf_tokenizer, fmt):
    """Chat runs with document-boundary masking (`data.packing_mask`), text with plain packing, preference pairs
    with DPO against a frozen copy of the starting weights (restored from the plan, not the checkpoint). The
    uninterrupted run builds the token cache; the resumed one starts from its checkpoint at step 3 and that
    cache (`stopped_at`: what a run stopped there leaves)."""
    data = tmp_path / "data"
    if fmt == "chat":
        write_jsonl(data / "train.jsonl", [{"messages": c} for c in conversations(400)])
    elif fmt == "preference":
        pairs = [{"prompt": f"say: {s}\n", "chosen": s, "rejected": s[::-1]} for s in sentences(300, seed=3)]
        write_jsonl(data / "train.jsonl", pairs)
    else:
        write_jsonl(data / "train.jsonl", [{"text": doc} for doc in documents(300)])
    options = {"chat": ("data.packing_mask=true",), "preference": ("trainer.objective=dpo",)}.get(fmt, ())
    plan = document_plan(data, hf_tokenizer, fmt, *options)
    whole_output, whole = run(plan, tmp_path / "whole")
    assert "token cache       building" in whole_output and "tokenizing" in whole_output
    if fmt == "chat":
        masked = float(whole_output.split("assistant tokens: ")[1].split("%")[0])
        assert 40 < masked < 90  # prompts, system lines and separators are no targets
    resumed_output, _ = run(plan, stopped_at(3, tmp_path / "whole", tmp_path / "parts"))
    assert "token cache       reused" in resumed_output and "tokenizing" not in resumed_output
    resumed = {r["step"]: r for r in metrics(tmp_path / "parts")}
    assert list(resumed) == [4, 5, 6]
    for step in resumed:
        assert resumed[step]["loss"] == pytest.approx(losses(whole)[step], abs=RERUN_TOLERANCE), step
    assert resumed[6]["val_loss"] == pytest.approx(whole[-1]["val_loss"], abs=RERUN_TOLERANCE)
    if fmt == "preference":
        margin = whole[-1]["val_rewards/margin"]
        assert margin > 0 and resumed[6]["val_rewards/margin"] == pytest.approx(margin, abs=RERUN_TOLERANCE)
