"""What a recipe says beyond its optimizer, as dockyard carries it from `dockyard convert` to the nodes: an inline
chat template and an end-of-sequence token (through Hydra's quoting, the plan, the token cache and the exported
tokenizer), a held-out size in rows, axolotl's column and role names, and early stopping (its count kept in
each checkpoint for a resumed run)."""

import functools
import http.server
import json
import shutil
import threading

import numpy as np
import pytest
import yaml

from compiler.config.compose import compose_config
from compiler.config.recipe_keys import Text, shown
from compiler.config.recipes import convert, read_recipe
from compiler.spec import Plan
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataFormat
from compiler.targets.kubernetes import translate as kubernetes
from compiler.targets.local import translate as local
from entrypoint.trainer import checkpoint
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import documents, prepare
from entrypoint.trainer.data.base import CacheMeta
from entrypoint.trainer.data.hub import hub_sources
from entrypoint.trainer.models.source import fetch
from entrypoint.trainer.train import plateaued
from tests.entrypoint_support import tiny_plan, train
from tests.helpers import plan_for
from tests.test_recipe_files import RECIPES
from tests.text_corpus import conversations, write_jsonl

TEMPLATES = {
    name: read_recipe(RECIPES / name)["chat_template"]
    for name in ("handbook-zephyr-7b-beta-sft_full.yaml", "handbook-smollm-sft.yaml", "handbook-smollm2-sft.yaml")
}
"""The inline templates the kept recipes carry (Zephyr's, on several lines; SmolLM's ChatML)."""
HOSTILE = "{{ '${not.an.interpolation}' }}\\'{{ \"it's\" }}\\\n{% if x %}\\\\{% endif %}trailing\\"
"""A template with what Hydra and OmegaConf would otherwise read: `${...}`, quotes, backslashes before a quote,
a line end and the text's end."""


def chat_overrides(folder, tokenizer, *more: str) -> list[str]:
    return [
        "data=local",
        f"data.path={folder}",
        "data.format=chat",
        f"data.tokenizer={tokenizer}",
        "model.vocab=512",
        *more,
    ]


@pytest.mark.parametrize("template", [*TEMPLATES.values(), HOSTILE], ids=[*TEMPLATES, "hostile"])
def test_an_inline_template_reaches_the_config_unchanged(template):
    """convert's override, read back by Hydra and OmegaConf as compose reads it."""
    line = f"data.chat_template={shown(Text(template))}"
    composed = compose_config([line, "data=local", "data.path=/d", "data.format=chat"])
    assert composed.data.chat_template == template


def test_an_inline_template_travels_in_the_plan_unchanged():
    """Through plan.json (as every target ships it) and a Kubernetes ConfigMap's YAML."""
    template = TEMPLATES["handbook-zephyr-7b-beta-sft_full.yaml"] + HOSTILE
    overrides = ["target=kubernetes", "data=hf", "data.name=HuggingFaceH4/ultrachat_200k", "data.format=chat"]
    plan = plan_for(*overrides, "data.tokenizer=s3://bucket/tok", f"data.chat_template={shown(Text(template))}")
    assert Plan.from_json(plan.to_json()).data.chat_template == template
    manifests = yaml.safe_load_all(str(kubernetes.to_request(plan, "img:1", run_id="r-1")))
    (config_map,) = (manifest for manifest in manifests if manifest["kind"] == "ConfigMap")
    assert json.loads(config_map["data"]["plan.json"])["data"]["chat_template"] == template


def test_a_recipes_template_is_its_port(tmp_path):
    for name, template in TEMPLATES.items():
        conversion = convert(read_recipe(RECIPES / name))
        assert conversion.overrides["data.chat_template"] == template and not conversion.refused, name
    axolotl = {"base_model": "m", "chat_template": "jinja", "chat_template_jinja": HOSTILE}
    axolotl |= {"special_tokens": {"eos_token": "<|eot_id|>", "pad_token": "<pad>"}}
    conversion = convert(axolotl)
    assert (conversion.overrides["data.chat_template"], conversion.overrides["data.eos_token"]) == (
        HOSTILE,
        "<|eot_id|>",
    )
    assert conversion.refused == []


def test_the_plan_checks_the_template_and_the_token(tmp_path, hf_tokenizer):
    folder = write_jsonl(tmp_path / "d" / "train.jsonl", [{"messages": talk} for talk in conversations(4)]).parent
    with pytest.raises(ConfigError) as caught:
        tiny_plan(*chat_overrides(folder, hf_tokenizer, "data.chat_template='{% for m in messages %}'"))
    assert caught.value.key == "data.chat_template" and "does not compile" in caught.value.one_line()
    with pytest.raises(ConfigError) as caught:
        tiny_plan(*chat_overrides(folder, hf_tokenizer, "data.eos_token='<|eot_id|>'"))
    assert caught.value.key == "data.eos_token" and "is not a token of the tokenizer" in caught.value.one_line()
    with pytest.raises(ConfigError) as caught:
        tiny_plan(*chat_overrides(folder, hf_tokenizer, "data.format=text", "data.chat_template='{{ x }}'"))
    assert caught.value.key == "data.chat_template"
    plan = tiny_plan(*chat_overrides(folder, hf_tokenizer, "data.eos_token='<|end|>'"))
    assert plan.data.eos_token == "<|end|>"


def test_the_nodes_render_with_the_recipes_template_and_token(tmp_path, hf_tokenizer):
    """The token cache holds what transformers renders with the template and token in place of the tokenizer's,
    and the exported model's tokenizer carries both."""
    from transformers import AutoTokenizer

    template = TEMPLATES["handbook-zephyr-7b-beta-sft_full.yaml"]  # writes eos_token after every turn
    talks = conversations(6)
    folder = write_jsonl(tmp_path / "d" / "train.jsonl", [{"messages": talk} for talk in talks]).parent
    line = f"data.chat_template={shown(Text(template))}"
    plan = tiny_plan(*chat_overrides(folder, hf_tokenizer, line, "data.eos_token='<|end|>'", "data.loss_on=all"))
    copy = prepare.recipe_tokenizer(plan, hf_tokenizer, tmp_path / "copies")
    assert prepare.recipe_tokenizer(plan, hf_tokenizer, tmp_path / "copies") == copy  # made once
    changed = shutil.copytree(hf_tokenizer, tmp_path / "changed")
    (changed / "tokenizer_config.json").write_text((changed / "tokenizer_config.json").read_text() + " ")
    assert prepare.recipe_tokenizer(plan, changed, tmp_path / "copies") != copy  # other files: another copy
    theirs = AutoTokenizer.from_pretrained(str(hf_tokenizer))
    theirs.chat_template, theirs.eos_token = template, "<|end|>"
    encoder = token_cache.Encoder(copy, plan.data.format, plan.data.loss_on)
    encoded = encoder.encode([(f"record {n}", {"messages": talk}) for n, talk in enumerate(talks)])
    assert encoder.facts.eos_token == "<|end|>"
    for talk, ours in zip(talks, encoded, strict=True):
        expected = theirs.apply_chat_template(talk, tokenize=True, return_dict=False)
        assert ours.ids.tolist() == list(expected)
        assert "<|end|>" in theirs.decode(expected) and "<|user|>\n" in theirs.decode(expected)
    exported = AutoTokenizer.from_pretrained(str(copy))
    assert (exported.chat_template, exported.eos_token) == (template, "<|end|>")
    assert json.loads((copy / "tokenizer_config.json").read_text()).get("chat_template") is None


def test_a_held_out_row_count_draws_that_many_documents(tmp_path, hf_tokenizer):
    rows = [{"messages": talk} for talk in conversations(40)]
    folder = write_jsonl(tmp_path / "d" / "train.jsonl", rows).parent
    plan = tiny_plan(*chat_overrides(folder, hf_tokenizer, "data.validation=7"))
    assert plan.data.validation == 7
    splits = {"train": documents.sources(folder), "validation": []}
    encoder = token_cache.Encoder(hf_tokenizer, plan.data.format, plan.data.loss_on)
    meta = token_cache.build(tmp_path / "cache", "k", encoder, lambda: token_cache.batches(splits, plan), print)
    assert (meta.splits["validation"].documents, meta.splits["train"].documents) == (7, 33)
    assert CacheMeta.read(tmp_path / "cache" / "k").splits == meta.splits
    held = token_cache.held_out(plan, 40)
    assert held is not None and held.sum() == 7 and np.array_equal(held, token_cache.held_out(plan, 40))
    with pytest.raises(ValueError, match="data.validation=7 rows: the training split has 7"):
        token_cache.held_out(plan, 7)
    for value, fix in (("0", "hold out 1 row or more"), ("1.5", "a whole number of rows")):
        with pytest.raises(ConfigError, match=fix):
            tiny_plan(*chat_overrides(folder, hf_tokenizer, f"data.validation={value}"))


def test_axolotl_column_and_role_names_are_read_as_the_row_shapes_name_them(tmp_path):
    """A DPO row of axolotl's chat_template.default (the prompt in `conversation`, one chosen and one rejected
    message), with its messages' keys and roles named otherwise."""
    row = {
        "conversation": [{"speaker": "human", "text": "Two plus two?"}],
        "chosen": {"speaker": "bot", "text": "Four."},
        "rejected": {"speaker": "bot", "text": "Five."},
    }
    folder = write_jsonl(tmp_path / "pairs" / "train.jsonl", [row]).parent
    recipe = {
        "base_model": "m",
        "rl": "dpo",
        "datasets": [
            {
                "path": str(folder),
                "type": "chat_template.default",
                "field_messages": "conversation",
                "message_property_mappings": {"role": "speaker", "content": "text"},
                "roles": {"user": ["human"], "assistant": ["bot"], "system": ["system"]},
            }
        ],
    }
    conversion = convert(recipe)
    assert conversion.refused == []
    lines = dict(line.split("=", 1) for line in conversion.lines())
    assert (lines["data.columns"], lines["data.message_keys"], lines["data.roles"]) == (
        "{prompt: 'conversation'}",
        "{role: 'speaker', content: 'text'}",
        "{user: ['human'], assistant: ['bot']}",
    )
    config = compose_config([f"{key}={value}" for key, value in lines.items() if key.startswith("data")])
    (source,) = hub_sources(config.data)
    assert list(documents.records(source, DataFormat.preference, "text")) == [
        {
            "prompt": [{"role": "user", "content": "Two plus two?"}],
            "chosen": [{"role": "assistant", "content": "Four."}],
            "rejected": [{"role": "assistant", "content": "Five."}],
        }
    ]


def test_early_stopping_counts_validations_without_a_lower_loss():
    assert not plateaued([3.0, 2.0, 2.5], 2) and plateaued([3.0, 2.0, 2.5, 2.0], 2)
    assert not plateaued([3.0, 3.0], 0) and not plateaued([3.0], 1) and plateaued([3.0, 3.0], 1)
    phi3 = convert(read_recipe(RECIPES / "axolotl-phi-phi3-ft.yml")).overrides
    assert (phi3["trainer.early_stopping_patience"], phi3["trainer.eval_interval"]) == (3, 1000)
    with pytest.raises(ConfigError) as caught:
        tiny_plan("trainer.early_stopping_patience=2")
    assert caught.value.key == "trainer.early_stopping_patience"


@pytest.mark.torchrun
def test_a_run_whose_validation_loss_stops_falling_ends_early_with_its_model(tmp_path, hf_tokenizer):
    """At lr 1e-30 (no fp32 weight moves) every validation loss is the first one: with patience 1 the run ends
    after its second validation (step 2 of 6), and saves the model as it stands. It trains on conversations
    rendered by the Zephyr recipe's template with another eos token, 5 of them held out: the node's token cache
    holds 5 validation documents, and the exported tokenizer carries the template and the token."""
    template = TEMPLATES["handbook-zephyr-7b-beta-sft_full.yaml"]
    folder = write_jsonl(tmp_path / "d" / "train.jsonl", [{"messages": talk} for talk in conversations(40)]).parent
    recipe = [f"data.chat_template={shown(Text(template))}", "data.eos_token='<|end|>'", "data.validation=5"]
    overrides = chat_overrides(folder, hf_tokenizer, *recipe, "trainer.eval_interval=1")
    overrides += ["trainer.early_stopping_patience=1", "trainer.lr=1e-30", "trainer.steps=6"]
    plan = tiny_plan(*overrides, "trainer.checkpoint_interval=1")
    records = train(plan, tmp_path)
    validations = [row for row in records if "val_loss" in row]
    assert [row["step"] for row in validations] == [1, 2]
    assert validations[0]["val_loss"] == validations[1]["val_loss"]
    # the checkpoint of step 1 keeps the validation loss the patience counts from, for a resumed run to go on
    saved = dict(checkpoint.complete(tmp_path / "checkpoints"))
    assert checkpoint.progress(saved[1])["val_losses"] == pytest.approx([validations[0]["val_loss"]], rel=1e-6)
    # launched again, it resumes from step 1 (the newest checkpoint: the early stop saves none) and counts on: its
    # first validation (step 2) ends it, where a fresh count would train on to step 3
    assert list(saved) == [1]
    resumed = [row for row in train(plan, tmp_path)[len(records) :] if "val_loss" in row]
    assert [row["step"] for row in resumed] == [2]
    (meta,) = (path for path in tmp_path.rglob("meta.json") if "tokenizer-" not in str(path))
    assert json.loads(meta.read_text())["splits"]["validation"]["documents"] == 5
    model = tmp_path / "model"
    assert (model / "chat_template.jinja").read_text() == template
    assert json.loads((model / "tokenizer_config.json").read_text())["eos_token"] == "<|end|>"


def test_local_dataset_folders_are_mounted_where_the_plan_names_them(tmp_path, hf_tokenizer):
    """A mixture of two folders on this machine: each mounted read-only at its own path in every container, where
    the nodes' `load_dataset` reads the names the plan gives."""
    talks = [{"messages": talk} for talk in conversations(8)]
    first, second = (write_jsonl(tmp_path / name / "train.jsonl", talks).parent for name in ("one", "two"))
    mixture = f"data.mixture=[{{name: '{first}'}}, {{name: '{second}', weight: 0.5}}, {{name: '{first}'}}]"
    plan = tiny_plan("data=hf", mixture, "data.format=chat", f"data.tokenizer={hf_tokenizer}", "model.vocab=512")
    request = local.to_request(plan, "img", run_id="r", run_dir=tmp_path / "run")
    for container in request.containers:
        mounted = [(m.source, m.target, m.read_only) for m in container.mounts if m.source in (str(first), str(second))]
        assert mounted == [(str(first), str(first), True), (str(second), str(second), True)]
    assert local.dataset_mounts(tiny_plan()) == []  # synthetic data: nothing of this machine's to mount


@pytest.fixture
def hub_revision(hf_checkpoints, tmp_path, monkeypatch):
    """A Hub stand-in on loopback (HF_ENDPOINT): a folder served over HTTP that holds config.json at the revision
    v1.0 only, where the Hub resolves a file."""
    served = tmp_path / "hub"
    (served / "acme/tiny-qwen2/resolve/v1.0").mkdir(parents=True)
    shutil.copy(hf_checkpoints["qwen2"] / "config.json", served / "acme/tiny-qwen2/resolve/v1.0")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield
    server.shutdown()


def test_a_model_revision_is_read_by_the_planner_and_fetched_by_the_nodes(hub_revision, tmp_path, monkeypatch):
    """The plan reads config.json at the recipe's revision; a node fetches the checkpoint at it (snapshot_download,
    the one call that needs the Hub, records what it is asked)."""
    import huggingface_hub

    assert convert({"model_name_or_path": "acme/tiny-qwen2", "model_revision": "v1.0"}).overrides["model.revision"] == (
        "v1.0"
    )
    plan = plan_for("model=hf", "model.path=acme/tiny-qwen2", "model.revision=v1.0")
    assert (plan.model.revision, plan.model.architecture) == ("v1.0", "qwen2")
    with pytest.raises(ConfigError, match="cannot read acme/tiny-qwen2.s config.json"):
        plan_for("model=hf", "model.path=acme/tiny-qwen2")  # main has none here
    with pytest.raises(ConfigError) as caught:
        plan_for("model=hf", f"model.path={tmp_path}", "model.revision=v1.0")
    assert caught.value.key == "model.revision"
    asked: list[dict] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **options: asked.append(options))
    fetch(plan.model.path, tmp_path / "fetched", plan.model.revision)
    assert asked[0]["revision"] == "v1.0" and asked[0]["local_dir"] == tmp_path / "fetched"
