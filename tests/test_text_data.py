"""Documents and conversations without torchrun: every file format reads the same records, the token cache is
keyed by what it depends on and reused without the tokenizer, packing's windows hold exactly the expected
tokens, assistant-only targets give the loss of a hand computation, and the plan checks the tokenizer.
(Through the real entrypoint and torchrun: tests/test_entrypoint_prepare.py.)"""

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from compiler.launch import summary
from compiler.planner.summary import summary_lines
from compiler.spec.contract import TOKENIZER_CHANNEL
from compiler.spec.errors import ConfigError
from compiler.spec.records import DatasetTokens
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.tokenizer import TokenizerFacts
from compiler.targets import index
from compiler.targets.local.translate import channel_sources
from compiler.targets.records import RunRecord
from compiler.targets.records import save as save_record
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import documents, prepare
from entrypoint.trainer.data.windows import PackedDocuments, SeparateDocuments
from entrypoint.trainer.models.loss import IGNORE_INDEX, mean_cross_entropy
from tests.entrypoint_support import TINY, tiny_plan
from tests.helpers import plan_for
from tests.text_corpus import (
    conversations,
    train_tokenizer,
    write_dataset,
    write_jsonl,
    write_parquet,
)
from tests.text_corpus import documents as corpus_documents

DOCKYARD = str(Path(sys.executable).parent / "dockyard")


@pytest.fixture
def tokenizer(hf_tokenizer):
    return hf_tokenizer


def text_overrides(folder, tokenizer) -> tuple[str, ...]:
    return ("data=local", f"data.path={folder}", "data.format=text", f"data.tokenizer={tokenizer}", "model.vocab=512")


def text_plan(folder, tokenizer, *overrides):
    return tiny_plan(*text_overrides(folder, tokenizer), *overrides)


def test_every_file_format_reads_the_same_documents(tmp_path):
    docs = corpus_documents(12)
    rows = [{"text": doc, "id": index} for index, doc in enumerate(docs)]
    paths = [
        write_jsonl(tmp_path / "a.jsonl", rows),
        write_jsonl(tmp_path / "b.jsonl.gz", rows),
        write_jsonl(tmp_path / "c.jsonl.zst", rows),
        write_parquet(tmp_path / "d.parquet", rows),
        write_dataset(tmp_path / "e-dataset", rows),
    ]
    for path in paths:
        assert list(documents.records(path, DataFormat.text, "text")) == docs, path.name
    (tmp_path / "f.txt").write_text(docs[0])
    assert list(documents.records(tmp_path / "f.txt", DataFormat.text, "text")) == docs[:1]
    assert documents.sources(tmp_path) == [*paths, tmp_path / "f.txt"]  # the dataset's own files are not sources


def test_a_record_without_the_field_is_named(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "fine"}, {"body": "no text"}])
    with pytest.raises(ValueError, match=r"a.jsonl, record 2: no str in its 'text' field"):
        list(documents.records(path, DataFormat.text, "text"))


def test_validation_by_path_holds_out_that_file(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": "a"}])
    write_jsonl(tmp_path / "held/val.jsonl", [{"text": "b"}])
    assert documents.split_sources(tmp_path, "held") == ([tmp_path / "train.jsonl"], [tmp_path / "held/val.jsonl"])


def test_assistant_targets_are_the_replies(tokenizer):
    from tokenizers import Tokenizer

    batch = [("a.jsonl, record 1", {"messages": conversations(1)[0]})]  # system, user, assistant
    encoded = token_cache.Encoder(tokenizer, DataFormat.chat, LossOn.assistant).encode(batch)[0]
    ids, targets = encoded.ids, encoded.targets
    decode = Tokenizer.from_file(str(tokenizer / "tokenizer.json")).decode
    assert (
        decode(ids[targets == 1].tolist(), skip_special_tokens=False)
        == batch[0][1]["messages"][-1]["content"] + "<|end|>"
    )
    assert 0 < targets.sum() < len(ids) / 2
    assert not encoded.eos_target  # <|end|> ends the reply: the end-of-text token after it is no target
    every = token_cache.Encoder(tokenizer, DataFormat.chat, LossOn.all).encode(batch)[0]
    assert every.targets.all() and every.eos_target


def test_masked_targets_give_the_loss_on_assistant_tokens_only():
    """mean_cross_entropy (every family's loss) against a hand computation over the unmasked positions."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=generator)
    targets = torch.randint(0, 11, (2, 5), generator=generator)
    kept = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    log_probs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    by_hand = -(log_probs[kept]).sum() / kept.sum()
    masked = targets.masked_fill(~kept, IGNORE_INDEX)
    assert mean_cross_entropy(logits, masked).item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert mean_cross_entropy(logits, torch.full_like(targets, IGNORE_INDEX)).item() == 0.0  # not NaN
    assert mean_cross_entropy(logits, targets).item() == pytest.approx(
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item(), rel=1e-6
    )


def hand_made_split(folder, docs: list[list[int]], targets: list[list[int]]) -> None:
    """A cache split as token_cache writes it: documents followed by the end-of-text token (0)."""
    folder.mkdir(parents=True)
    tokens = [t for doc in docs for t in [*doc, 0]]
    flags = [f for doc in targets for f in [*doc, 1]]
    np.save(folder / "tokens.npy", np.asarray(tokens, dtype=np.uint32))
    np.save(folder / "targets.npy", np.asarray(flags, dtype=np.uint8))
    np.save(folder / "starts.npy", np.cumsum([0] + [len(d) + 1 for d in docs]))


def test_packed_windows_hold_documents_with_eos_between(tmp_path):
    docs = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    hand_made_split(tmp_path / "train", docs, [[1, 1, 0], [1, 1], [1, 1, 1, 1]])
    packed = PackedDocuments(tmp_path / "train", seq_len=4, seed=0)
    assert packed.windows == 2  # 12 tokens: windows of 5 at 0 and 4
    assert packed.window(0)[0].tolist() == [5, 6, 7, 0, 8]
    assert packed.window(1)[0].tolist() == [8, 9, 0, 10, 11]
    order = packed._order(0).tolist()
    inputs, targets = packed(torch.tensor([order.index(0)]))
    assert inputs.tolist() == [[5, 6, 7, 0]]
    assert targets.tolist() == [[6, IGNORE_INDEX, 0, 8]]  # token 7 is no target


def test_separate_windows_pad_and_truncate(tmp_path):
    docs = [[5, 6], [7, 8, 9, 10, 11, 12]]
    hand_made_split(tmp_path / "train", docs, [[1, 1], [1] * 6])
    separate = SeparateDocuments(tmp_path / "train", seq_len=4, seed=0, eos=0)
    assert separate.windows == 2
    tokens, flags = separate.window(0)
    assert tokens.tolist() == [5, 6, 0, 0, 0] and flags.tolist() == [1, 1, 1, 0, 0]
    assert separate.window(1)[0].tolist() == [7, 8, 9, 10, 11]  # truncated


@pytest.fixture
def single_process_group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=60))
    yield
    dist.destroy_process_group()


def test_the_cache_is_built_once_and_reused_without_the_tokenizer(
    tmp_path, tokenizer, single_process_group, monkeypatch
):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"text": doc} for doc in corpus_documents(300)])
    plan = text_plan(data, tokenizer, "data.validation=0.2")
    encoded: list[int] = []

    class CountingEncoder(token_cache.Encoder):
        def encode(self, batch):
            encoded.append(len(batch))
            return super().encode(batch)

    monkeypatch.setattr(token_cache, "Encoder", CountingEncoder)
    log: list[str] = []
    first = prepare.ensure_cache(plan, data, tokenizer, tmp_path / "cache", True, log.append)
    assert sum(encoded) == 300 and "token cache       building" in log[0] and "tokenizing        300" in log[-1]
    meta = token_cache.CacheMeta.read(first)
    train, held = meta.splits["train"], meta.splits["validation"]
    assert train.documents + held.documents == 300 and 30 < held.documents < 90  # ~0.2, drawn by document
    encoded.clear()
    log.clear()
    again = prepare.ensure_cache(plan, data, tokenizer, tmp_path / "cache", True, log.append)
    assert again == first and encoded == [] and log == [f"token cache       reused {first} (no tokenization)"]
    write_jsonl(data / "train.jsonl", [{"text": doc} for doc in corpus_documents(301)])
    changed = prepare.ensure_cache(plan, data, tokenizer, tmp_path / "cache", True, log.append)
    assert changed != first and sum(encoded) == 301  # other content, another key
    other_seed = text_plan(data, tokenizer, "data.validation=0.2", "trainer.seed=5")
    assert prepare.ensure_cache(other_seed, data, tokenizer, tmp_path / "cache", True, log.append) != changed


def write_tokenizer_config(folder, **changes):
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, **changes}))


def test_the_plan_checks_the_tokenizer(tmp_path, tokenizer):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"text": "a b"}])
    vocab = TokenizerFacts.read(tokenizer).vocab
    assert text_plan(data, tokenizer).data.tokenizer == str(tokenizer)
    with pytest.raises(ConfigError, match=rf"data.tokenizer: its {vocab} token ids exceed model.vocab=256.*set model"):
        text_plan(data, tokenizer, "model.vocab=256")
    plain = train_tokenizer(tmp_path / "plain", chat_template=None)
    assert TokenizerFacts.read(plain).chat_template is None
    with pytest.raises(ConfigError, match=r"data.format: chat needs the tokenizer's chat template"):
        text_plan(data, plain, "data.format=chat")
    write_tokenizer_config(plain, eos_token=None)
    with pytest.raises(ConfigError, match=r"data.tokenizer: names no eos_token"):
        text_plan(data, plain)


def test_the_sweep_summary_shows_the_validation_loss_and_plots_its_curve(tmp_path):
    curve = [
        {"step": 5, "loss": 5.0, "elapsed_s": 1.0, "val_loss": 5.2, "val_ppl": 181.3},
        {"step": 8, "loss": 4.6, "elapsed_s": 1.6},
        {"step": 10, "loss": 4.1, "elapsed_s": 2.0, "val_loss": 4.4, "val_ppl": 81.5},
    ]
    point = RunRecord(run_dir=str(tmp_path), status="completed", final=curve[-1], num=0)
    assert summary.row(point, curve=curve)["val_loss"] == "4.4000"
    assert summary.row(RunRecord(run_dir="b", status="completed", final={"loss": 4.0}))["val_loss"] == ""
    summary.plot([(point, curve)], frozenset(), tmp_path / "loss.png")
    training_only = [{k: v for k, v in m.items() if not k.startswith("val_")} for m in curve]
    summary.plot([(point, training_only)], frozenset(), tmp_path / "training.png")
    assert (tmp_path / "loss.png").read_bytes() != (tmp_path / "training.png").read_bytes()


def test_a_sweep_summary_sorts_by_the_validation_loss(tmp_path):
    """`dockyard status SWEEP --sort val_loss`: the best point first, a point without a value last."""
    finals = {0: {"loss": 2.0, "val_loss": 2.5}, 1: {"loss": 2.2}, 2: {"loss": 2.4, "val_loss": 2.1}}
    for num, final in finals.items():
        save_record(
            RunRecord(run_id=f"p{num}", run_dir=str(tmp_path / str(num)), status="completed", final=final, num=num)
        )
    (tmp_path / summary.SUMMARY_CSV).write_text("")
    result = subprocess.run([DOCKYARD, "status", str(tmp_path), "--sort", "val_loss"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [cells[1].strip() for cells in rows[1:]] == ["2", "0", "1"]
    wrong = subprocess.run([DOCKYARD, "status", str(tmp_path), "--sort", "overrides"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


def test_a_tokenizer_on_s3_is_downloaded_once_per_node(tmp_path, hf_tokenizer, aws, single_process_group):
    for file in hf_tokenizer.iterdir():
        aws.client("s3").upload_file(str(file), "dockyard-example-data", f"tokenizer/{file.name}")
    plan = tiny_plan(
        "data=s3",
        "data.uri=s3://dockyard-example-data/docs/",
        "data.format=text",
        "data.tokenizer=s3://dockyard-example-data/tokenizer/",
        "model.vocab=512",
    )
    paths = Paths(tmp_path / "root")
    folder = prepare.tokenizer_folder(plan, paths, leader=True)
    assert folder == paths.checkpoints / "token-cache/tokenizer"
    assert TokenizerFacts.read(folder) == TokenizerFacts.read(hf_tokenizer)


def test_the_plan_says_how_many_epochs_the_steps_cover():
    plan = tiny_plan("data.tokens=1536")  # 6 steps × 512 tokens
    assert summary_lines(plan)[[line[:4] for line in summary_lines(plan)].index("data")].endswith(
        "2.00 epochs of 1,536 tokens (data.tokens)"
    )
    gpu = plan_for("experiment=gpt2-124m-p4d", "data.tokens=1000000000")
    assert "per epoch (data.tokens)" in next(line for line in summary_lines(gpu) if line.startswith("data"))
    with pytest.raises(ConfigError, match="data.tokens: 0 is not a token count"):
        tiny_plan("data.tokens=0")


def uncached_text_plan(folder, tokenizer, *overrides):
    """`text_plan` compiled again: the plan reads the caches present now."""
    return plan_for(*TINY, *text_overrides(folder, tokenizer), *overrides)


def test_the_plan_reads_the_token_count_an_earlier_runs_cache_measured(tmp_path, tokenizer, single_process_group):
    """After a first run tokenized the data, the next plan of the same data, tokenizer and options finds that
    run's cache through the runs index (or in data.cache) and counts its epochs with the measured tokens."""
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"text": doc} for doc in corpus_documents(200)])
    plan = uncached_text_plan(data, tokenizer, "data.validation=0.2")
    assert plan.dataset is None  # nothing tokenized yet
    run = tmp_path / "runs/first"
    cache = prepare.ensure_cache(plan, data, tokenizer, run / "checkpoints/token-cache", True, lambda line: None)
    measured = token_cache.CacheMeta.read(cache).splits["train"].tokens
    index.register("first", run)
    again = uncached_text_plan(data, tokenizer, "data.validation=0.2")
    assert again.dataset == DatasetTokens(tokens=measured, source=str(cache))
    assert again.content_hash == plan.content_hash  # a prediction, outside the hash
    line = next(line for line in summary_lines(again) if line.startswith("data"))
    epochs = again.trainer.steps * again.batch.tokens_per_step / measured
    assert line.endswith(f"{epochs:.2f} epochs of {measured:,} tokens (measured by the token cache {cache})")
    assert uncached_text_plan(data, tokenizer, "data.validation=0.3").dataset is None  # other options, another key
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    cache.rename(shared / cache.name)
    found = uncached_text_plan(data, tokenizer, "data.validation=0.2", f"data.cache={shared}").dataset
    assert found == DatasetTokens(tokens=measured, source=str(shared / cache.name))


def test_the_local_target_mounts_a_host_tokenizer_as_a_channel(tmp_path, tokenizer):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"text": "a b"}])
    channels = channel_sources(text_plan(data, tokenizer), tmp_path / "run")
    assert channels[TOKENIZER_CHANNEL] == str(tokenizer) and channels["train"] == str(data)
    assert TOKENIZER_CHANNEL not in channel_sources(tiny_plan("data=local", f"data.path={data}"), tmp_path / "run")
