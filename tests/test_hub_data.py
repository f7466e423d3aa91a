"""`data=hf`: datasets as recipes name them (`data.name`, `data.config`, `data.split`, a held-out split, and
`data.mixture` with TRL's weights), read through `datasets` from local folders (nothing downloaded): checked at
plan time, keyed in the token cache by what they hold, and trained on by two ranks as a mixture of alpaca and
ShareGPT rows."""

import json
from pathlib import Path

import pytest

from compiler.config.compose import compose_config
from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataFormat
from entrypoint.trainer.data import documents, hub
from entrypoint.trainer.data.hub import HubSource
from tests.entrypoint_support import train
from tests.helpers import plan_for
from tests.pretrained import save_checkpoint
from tests.text_corpus import conversations, sentences, train_tokenizer, write_jsonl


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A folder of alpaca JSON lines (read by `load_dataset`), a ShareGPT dataset `save_to_disk` wrote, a
    tokenizer and a checkpoint."""
    import datasets

    root = tmp_path_factory.mktemp("hub-data")
    said = sentences(150, seed=5)
    alpaca = [{"instruction": said[3 * i], "input": said[3 * i + 1], "output": said[3 * i + 2]} for i in range(50)]
    sharegpt = [
        {"conversations": [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in talk]}
        for talk in conversations(40)
        if all(m["role"] in ("user", "assistant") for m in talk)
    ]
    write_jsonl(root / "alpaca" / "train.jsonl", alpaca)
    datasets.Dataset.from_list(sharegpt).save_to_disk(str(root / "sharegpt"))
    return {
        "alpaca": root / "alpaca",
        "sharegpt": root / "sharegpt",
        "tokenizer": train_tokenizer(root / "tokenizer"),
        "llama": save_checkpoint(root / "llama", "llama", vocab=512),
    }


def hf(folders: dict[str, Path], *overrides: str) -> list[str]:
    return [
        "model=hf",
        f"model.path={folders['llama']}",
        "model.seq_len=64",
        "data=hf",
        f"data.tokenizer={folders['tokenizer']}",
        "data.tokens=20000",
        "parallelism.micro_batch=1",
        *overrides,
    ]


def mixture(folders: dict[str, Path], weight: float = 0.5) -> str:
    return f"data.mixture=[{{name: '{folders['alpaca']}', weight: {weight}}}, {{name: '{folders['sharegpt']}'}}]"


def refusal(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    return caught.value


def test_a_mixture_of_local_folders_plans(folders):
    plan = plan_for(*hf(folders, mixture(folders)))
    assert [entry.get("weight") for entry in plan.data.mixture] == [0.5, None]
    shown = "\n".join(summary_lines(plan))
    assert f"hf {folders['alpaca']}[train] x0.5 + {folders['sharegpt']}[train]" in shown


def test_plan_refuses_what_the_nodes_could_not_read(folders, tmp_path):
    assert refusal(hf(folders)).key == "data.name"  # neither a name nor a mixture
    assert refusal(hf(folders, mixture(folders, weight=2))).key == "data.mixture[1].weight"
    assert refusal(hf(folders, f"data.name={tmp_path / 'absent'}")).key == "data.name"
    write_jsonl(tmp_path / "rows" / "train.jsonl", [{"question": "a", "answer": "b"}])
    wrong = refusal(hf(folders, f"data.name={tmp_path / 'rows'}"))
    assert "record 1 has columns question, answer" in wrong.one_line()
    assert "messages | prompt+completion | conversations | instruction+output" in wrong.one_line()
    assert refusal(["data=local", f"data.path={tmp_path}", "data.name=x/y"]).key == "data.name"
    assert refusal(["data=local", f"data.path={tmp_path}", "data.roles={human: user}"]).key == "data.roles"


def test_records_of_a_mixture_keep_each_weight_and_shape(folders):
    data = compose_config(hf(folders, mixture(folders), "data.validation=train")).data
    train, held_out = hub.hub_sources(data), hub.hub_sources(data, "train")
    assert [source.split for source in held_out] == ["train", "train"]
    alpaca, sharegpt = (list(documents.records(source, DataFormat.chat, "text")) for source in train)
    assert len(alpaca) == 25  # the first half of 50 rows, as the handbook's weight keeps them
    assert alpaca[0]["prompt"].endswith("### Response:\n") and alpaca[0]["completion"]
    assert {m["role"] for m in sharegpt[0]["messages"]} == {"user", "assistant"}


def test_the_cache_key_follows_what_the_sources_hold(folders, tmp_path):
    source = HubSource(str(folders["alpaca"]), None, "train")
    before = hub.fingerprint([source])
    assert hub.fingerprint([HubSource(source.name, None, "train", 0.5)]) != before
    assert hub.fingerprint([HubSource(source.name, None, "test")]) != before
    copy = tmp_path / "alpaca"
    copy.mkdir()
    rows = (folders["alpaca"] / "train.jsonl").read_text()
    (copy / "train.jsonl").write_text(rows)
    same = hub.fingerprint([HubSource(str(copy), None, "train")])
    (copy / "train.jsonl").write_text(rows.replace('"output": "', '"output": "Changed. ', 1))
    assert hub.fingerprint([HubSource(str(copy), None, "train")]) != same


@pytest.mark.torchrun
def test_two_ranks_train_on_a_mixture_of_alpaca_and_sharegpt_rows(folders, tmp_path):
    """Half the alpaca folder (read by load_dataset) and the saved ShareGPT dataset, tokenized into one cache
    and trained on by two ranks."""
    plan = plan_for(
        *hf(folders, mixture(folders), "data.validation=0.25", "data.tokens=384", "hardware.nodes=1"),
        "parallelism.mixed_precision=fp32",
        "trainer.steps=3",
    )
    records = train(plan, tmp_path, HF_DATASETS_CACHE=str(tmp_path / "hf-cache"))
    assert [row["step"] for row in records if "loss" in row][-1] == 3
    meta = json.loads(next((tmp_path / "checkpoints" / "token-cache").glob("*/meta.json")).read_text())
    sharegpt = len(list(documents.records(HubSource(str(folders["sharegpt"]), None, "train"), DataFormat.chat, "")))
    assert sum(split["documents"] for split in meta["splits"].values()) == 25 + sharegpt
