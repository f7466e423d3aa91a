"""Files a user hands dockyard, read as hostile: the one reader (`compiler.spec.files`) refuses what is no
regular file, too large, not UTF-8 or nested too deep, in one line naming the key and the file; a
checkpoint's config.json and a tokenizer's files are checked against what their architecture allows. The
host's planner and the nodes' trainer read through the same functions, so a node fails with the same line."""

import json
import os
from pathlib import Path

import pytest

from compiler.spec import files
from compiler.spec.tokenizer import TokenizerFacts
from tests.hostile import assert_clean, invoke
from tests.test_pretrained_plan import LLAMA3_8B


def refusal(path: Path, key: str = "model.path") -> str:
    with pytest.raises(files.FileError) as error:
        files.read_json_object(path, key)
    assert error.value.key == key and error.value.path == path
    line = error.value.one_line()
    assert "\n" not in line and line.startswith(f"{key}: {path} ")
    return line


def test_what_is_no_regular_file_is_refused_without_reading_it(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it to read would block for ever
    assert "is a FIFO" in refusal(tmp_path / "fifo")
    assert "is a folder" in refusal(tmp_path)
    (tmp_path / "zero").symlink_to("/dev/zero")  # reading it would never end
    assert "is not a regular file" in refusal(tmp_path / "zero")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert "is a link to nothing" in refusal(tmp_path / "dangling")
    assert "does not exist" in refusal(tmp_path / "missing")


def test_a_link_to_a_kernel_file_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "mem").symlink_to("/proc/self/mem")  # "regular", but reading offset 0 fails
    assert "cannot be read" in refusal(tmp_path / "mem")


def test_a_link_to_a_regular_file_elsewhere_is_read(tmp_path):
    """Hugging Face's cache links a snapshot's files into ../../blobs: a link out of the folder is followed."""
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "abc").write_text('{"a": 1}')
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "config.json").symlink_to("../blobs/abc")
    assert files.read_json_object(tmp_path / "snapshot" / "config.json", "model.path") == {"a": 1}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"a": "\xff"}', "is not UTF-8 text (byte 7)"),
        (b"[" * 100_000 + b"]" * 100_000, "nests its values too deep to read"),
        (b'{"a": NaN}', "holds NaN, which JSON does not have"),
        (b'{"a": ', "is not JSON (Expecting value, line 1)"),
        (b"[1]", "holds a JSON list, not an object"),
        (b" " * (files.SMALL_FILE + 1), "is larger than 4 MiB"),
    ],
    ids=["utf-8", "deep", "nan", "half", "list", "large"],
)
def test_a_file_that_is_not_what_it_should_be_is_one_line(tmp_path, content, problem):
    (tmp_path / "config.json").write_bytes(content)
    assert problem in refusal(tmp_path / "config.json")


CONFIG_JSON_CASES = {
    "rope_theta": ({"rope_theta": "abc"}, 'gives rope_theta = "abc", not a positive number'),
    "rope_theta_nan": ({"rope_theta": -1}, "gives rope_theta = -1, not a positive number"),
    "kv_heads_zero": ({"num_key_value_heads": 0}, "gives num_key_value_heads = 0, not a whole number ≥ 1"),
    "kv_heads_text": ({"num_key_value_heads": "2"}, 'gives num_key_value_heads = "2", not a whole number ≥ 1'),
    "kv_heads_odd": ({"num_key_value_heads": 3}, "gives 3 key/value heads, which do not divide 32 heads"),
    "head_dim": ({"head_dim": -128}, "gives head_dim = -128, not a whole number ≥ 1"),
    "heads": (
        {"num_attention_heads": 30, "num_key_value_heads": 2},
        "gives 30 heads, which do not divide hidden_size 4096",
    ),
    "vocab": ({"vocab_size": 1.5}, "gives vocab_size = 1.5, not a whole number ≥ 1"),
    "layers_bool": ({"num_hidden_layers": True}, "gives num_hidden_layers = true, not a whole number ≥ 1"),
    "tied": ({"tie_word_embeddings": "yes"}, 'gives tie_word_embeddings = "yes", not true or false'),
    "model_type": ({"model_type": "llama\n\x1b[2Jdockyard: ok"}, "gives model_type = "),
    "long": ({"intermediate_size": "9" * 5000}, 'gives intermediate_size = "9999999999'),
}


@pytest.mark.parametrize(("changes", "problem"), CONFIG_JSON_CASES.values(), ids=CONFIG_JSON_CASES)
def test_a_config_json_shape_its_architecture_cannot_have_is_one_line(tmp_path, changes, problem):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(LLAMA3_8B | changes))
    outcome = invoke(["plan", "model=hf", f"model.path={checkpoint}"], tmp_path)
    assert_clean(outcome)
    assert outcome.status == 2 and outcome.error_keys == ["model.path"], outcome.stderr
    assert f"{checkpoint}/config.json {problem}" in outcome.stderr
    assert "\x1b" not in outcome.stderr and len(outcome.stderr) < 500


@pytest.mark.parametrize(
    ("model_type", "targets", "problem"),
    [
        ("llama", "[c_attn]", "'c_attn' names no projection of llama; choose among q_proj, k_proj"),
        ("llama", "[self_attn.qkv]", "'self_attn.qkv' names no projection of llama"),
        ("gpt2", "[q_proj]", "'q_proj' names no projection of gpt2; choose among c_attn, c_proj, c_fc"),
    ],
)
def test_lora_targets_name_projections_the_architecture_has_even_with_lora_off(tmp_path, model_type, targets, problem):
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128, "vocab_size": 256}
    (tmp_path / "config.json").write_text(json.dumps(gpt2 if model_type == "gpt2" else LLAMA3_8B))
    outcome = invoke(["plan", "model=hf", f"model.path={tmp_path}", f"model.lora.targets={targets}"], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == ["model.lora.targets"], outcome.stderr
    assert problem in outcome.stderr


def test_a_malformed_s3_model_path_fails_its_grammar_before_any_request(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a request would fail differently
    outcome = invoke(["plan", "model=hf", "model.path=s3://My_Bucket/models/x"], tmp_path)
    assert_clean(outcome)
    assert outcome.error_keys == ["model.path"] and "is not an S3 URI" in outcome.stderr, outcome.stderr


def tokenizer_folder(folder: Path, added: list, vocab: object = None) -> Path:
    folder.mkdir(exist_ok=True)
    model = {"type": "BPE", "vocab": {"a": 0, "b": 1} if vocab is None else vocab, "merges": []}
    (folder / "tokenizer.json").write_text(json.dumps({"model": model, "added_tokens": added}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return folder


@pytest.mark.parametrize(
    ("added", "vocab", "problem"),
    [
        ([{"content": "</s>"}], None, "added_tokens[0] has no id"),
        ([{"content": "</s>", "id": -1}], None, "added_tokens[0] gives id = -1, not a whole number ≥ 0"),
        ([{"content": "</s>", "id": 2.5}], None, "added_tokens[0] gives id = 2.5, not a whole number ≥ 0"),
        ([{"content": "</s>", "id": "2"}], None, 'added_tokens[0] gives id = "2", not a whole number ≥ 0'),
        (["</s>"], None, "gives added_tokens that are not a list of objects"),
        ([], {"a": -3}, 'gives the token "a" the id -3, not a whole number ≥ 0'),
        ([], {"a": 0.5}, 'gives the token "a" the id 0.5, not a whole number ≥ 0'),
        ([], "a b", "has no model.vocab"),
    ],
)
def test_a_tokenizer_with_impossible_ids_is_one_line_on_the_host_and_the_node(tmp_path, added, vocab, problem):
    """`TokenizerFacts.read` is what the planner and the trainer both call (`entrypoint.trainer.data.prepare`)."""
    folder = tokenizer_folder(tmp_path / "tokenizer", added, vocab)
    with pytest.raises(files.FileError) as error:
        TokenizerFacts.read(folder)
    assert error.value.key == "data.tokenizer"
    assert problem in error.value.one_line(), error.value.one_line()
    data = ["data=local", "data.format=text", f"data.tokenizer={folder}", f"data.path={tmp_path}"]
    outcome = invoke(["plan", *data], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == ["data.tokenizer"], outcome.stderr
    assert problem in outcome.stderr


def test_a_good_tokenizer_still_reads(tmp_path):
    facts = TokenizerFacts.read(tokenizer_folder(tmp_path / "t", [{"content": "</s>", "id": 2}]))
    assert (facts.vocab, facts.eos_id) == (3, 2)


def test_the_plan_summary_is_printed_in_one_printable_form():
    """A warning quoting a value from a file (a path, a model type) cannot erase the screen or forge a line."""
    import dataclasses

    from compiler.planner.summary import summary_lines
    from tests.helpers import plan_for

    plan = plan_for("experiment=smoke")
    lines = summary_lines(dataclasses.replace(plan, warnings=("data.validation: v\x1b[2J\ndockyard: ok",)))
    assert "warning   data.validation: v\\x1b[2J\\ndockyard: ok" in lines
    assert all(line.isprintable() for line in lines)


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        ({"weight_map": {"w": "../../etc/passwd"}}, "has no weight_map of tensor names to shard files beside it"),
        ({"weight_map": {"w": "/etc/passwd"}}, "has no weight_map of tensor names to shard files beside it"),
        ({"weight_map": {"w": 3}}, "has no weight_map of tensor names to shard files beside it"),
        ({"metadata": {}}, "has no weight_map of tensor names to shard files beside it"),
        ([], "holds a JSON list, not an object"),
    ],
)
def test_the_nodes_read_a_safetensors_index_through_the_same_reader(tmp_path, index, problem):
    """The trainer loads a checkpoint's shards from its index: a shard outside the folder is never opened."""
    from entrypoint.trainer.models.weights import SAFETENSORS_INDEX, load_safetensors

    (tmp_path / SAFETENSORS_INDEX).write_text(json.dumps(index))
    with pytest.raises(files.FileError) as error:
        load_safetensors(tmp_path)
    assert error.value.one_line() == f"model.path: {tmp_path / SAFETENSORS_INDEX} {problem}; fix or replace the file"
