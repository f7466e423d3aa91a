"""The conversation formats users bring (tools, prompt/completion, named templates, `{% generation %}`
blocks), the refusals (a template's own exception, a record that is no conversation, a split without
targets, a template that does not compile) and the plan's date, without torchrun."""

import json
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pytest

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataFormat, LossOn
from compiler.spec.token_cache_key import cache_key
from compiler.spec.tokenizer import TokenizerFacts
from entrypoint.trainer.data import FORMATS, documents
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data.base import Encoded, TargetsError
from entrypoint.trainer.data.chat import ChatEncoder, ChatRecordError
from tests.entrypoint_support import TINY, tiny_plan
from tests.test_chat_templates import TEMPLATES_DIR, make_tokenizer, target_runs
from tests.text_corpus import write_jsonl

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}]
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"function": {"name": "weather", "arguments": {}}}],
    },
    {"role": "tool", "content": "rain, 4 C"},
    {"role": "assistant", "content": "Rain and 4 degrees."},
]
GENERATION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'assistant' %}{% generation %}{{ message.content }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ message.content }}<|im_end|>{% endif %}\n{% endfor %}"
)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("qwen"), "qwen2.5")


def encoder(folder: Path, loss_on: LossOn = LossOn.assistant) -> ChatEncoder:
    return ChatEncoder(folder, loss_on, date.today())


def test_tool_calls_render_as_the_template_does_and_the_replies_are_targets(qwen):
    chat = encoder(qwen)
    encoded = chat.encode({"messages": TOOL_CONVERSATION, "tools": TOOLS})
    expected = chat.tokenizer.apply_chat_template(TOOL_CONVERSATION, tools=TOOLS, tokenize=True)["input_ids"]
    assert encoded.ids.tolist() == expected
    runs = target_runs(chat.tokenizer, encoded.ids, encoded.targets)
    call = '\n<tool_call>\n{"name": "weather", "arguments": {}}\n</tool_call>'
    assert runs == ["Let me look." + call + "<|im_end|>", "Rain and 4 degrees.<|im_end|>"]  # the call is trained
    assert "rain, 4 C" not in "".join(runs)


def test_prompt_completion_rows_train_the_completion_only(qwen):
    chat = encoder(qwen)
    plain = chat.encode({"prompt": "Two plus two is", "completion": " four."})
    assert chat.tokenizer.decode(plain.ids[plain.targets == 1].tolist()) == " four." and plain.eos_target
    shot = [{"role": "user", "content": "Say one."}, {"role": "assistant", "content": "One."}]
    prompt = [*shot, {"role": "user", "content": "Say two."}]
    conversational = chat.encode({"prompt": prompt, "completion": [{"role": "assistant", "content": "Two."}]})
    assert target_runs(chat.tokenizer, conversational.ids, conversational.targets) == [
        "Two.<|im_end|>"
    ]  # not the example


def test_generation_blocks_give_transformers_assistant_mask(tmp_path, qwen):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen)
    tokenizer.chat_template = GENERATION_TEMPLATE
    tokenizer.save_pretrained(tmp_path)
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello there."}]
    encoded = encoder(tmp_path).encode({"messages": messages})
    expected = tokenizer.apply_chat_template(messages, return_dict=True, return_assistant_tokens_mask=True)
    assert encoded.ids.tolist() == expected["input_ids"]
    assert encoded.targets.tolist() == expected["assistant_masks"] and encoded.targets.sum() > 0


def test_named_templates_are_read_and_the_tool_template_renders_tools(tmp_path, qwen):
    config = json.loads((qwen / "tokenizer_config.json").read_text())
    default = (TEMPLATES_DIR / "qwen2.5.jinja").read_text()
    tool_use = "TOOLS {{ tools | length }}|" + default
    (tmp_path / "tokenizer.json").write_text((qwen / "tokenizer.json").read_text())
    listed = [{"name": "default", "template": default}, {"name": "tool_use", "template": tool_use}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": listed}))
    assert TokenizerFacts.read(tmp_path).chat_templates == {"default": default, "tool_use": tool_use}
    chat = encoder(tmp_path)
    with_tools = chat.encode({"messages": TOOL_CONVERSATION, "tools": TOOLS})
    assert chat.tokenizer.decode(with_tools.ids.tolist()).startswith("TOOLS 1|")
    assert target_runs(chat.tokenizer, with_tools.ids, with_tools.targets)[-1] == "Rain and 4 degrees.<|im_end|>"


def test_a_template_exception_names_the_file_and_record(tmp_path):
    gemma = make_tokenizer(tmp_path / "gemma", "gemma2")
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    with pytest.raises(ChatRecordError) as raised:
        token_cache.Encoder(gemma, DataFormat.chat, LossOn.assistant).encode(
            [("d/a.jsonl, record 7", {"messages": system})]
        )
    assert str(raised.value) == "d/a.jsonl, record 7: the chat template raised: System role not supported"


def test_a_record_that_is_no_conversation_is_named(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"messages": [{"role": "user", "content": "x"}]}, {"prompt": "p"}])
    with pytest.raises(ValueError, match=r"a.jsonl, record 2: no conversation: a 'messages' list, or 'prompt'"):
        list(documents.records(path, DataFormat.chat, "text"))


def test_a_split_with_too_few_targets_is_refused(tmp_path, qwen):
    plan = tiny_plan(
        "data=local", f"data.path={tmp_path}", "data.format=chat", f"data.tokenizer={qwen}", "model.vocab=512"
    )
    meta = token_cache.CacheMeta("key", {"train": token_cache.SplitCounts(documents=10, tokens=5000, targets=20)})
    with pytest.raises(TargetsError, match=r"data.loss_on=assistant: the train split has 20 target tokens of"):
        FORMATS[DataFormat.chat].check(plan, meta)
    meta.splits["train"].targets = 500
    FORMATS[DataFormat.chat].check(plan, meta)  # 10%: enough


def test_the_end_of_text_token_is_appended_once_and_trained_only_after_an_open_turn():
    eos = 9
    closed = token_cache._with_eos(
        Encoded(np.asarray([1, 2, eos], np.uint32), np.asarray([0, 1, 0], np.uint8), False), eos
    )
    assert closed[0].tolist() == [1, 2, eos] and closed[1].tolist() == [0, 1, 0]  # Phi's rendering ends with it
    open_turn = token_cache._with_eos(Encoded(np.asarray([1, 2], np.uint32), np.asarray([0, 1], np.uint8)), eos)
    assert open_turn[0].tolist() == [1, 2, eos] and open_turn[1].tolist() == [0, 1, 1]


def test_a_chat_plan_is_dated_and_its_template_compiled(tmp_path, qwen):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"messages": TOOL_CONVERSATION}])
    overrides = ("data=local", f"data.path={tmp_path / 'data'}", f"data.tokenizer={qwen}", "model.vocab=512")
    plan = tiny_plan(*overrides, "data.format=chat")
    assert plan.chat_date == datetime.now(UTC).date().isoformat()
    assert tiny_plan(*overrides, "data.format=text").chat_date is None
    resumed = checked_plan(compose_config((*TINY, *overrides, "data.format=chat")), "2031-02-03")
    assert resumed.chat_date == "2031-02-03"  # a resumed run keeps its first attempt's date
    files = [tmp_path / "data" / "a.jsonl"]
    import dataclasses

    later = dataclasses.replace(plan, chat_date="2031-02-03")
    assert cache_key(plan, qwen, tmp_path / "data", files, []) != cache_key(later, qwen, tmp_path / "data", files, [])
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_text((qwen / name).read_text())
    (broken / "chat_template.jinja").write_text("{% for message in messages %}{{ message.content }}")
    with pytest.raises(ConfigError, match=r"data.tokenizer: its chat template 'default' does not compile: .*endfor"):
        tiny_plan(*overrides[:1], overrides[1], f"data.tokenizer={broken}", "model.vocab=512", "data.format=chat")


def test_the_plan_renders_the_first_records_and_names_a_template_refusal(tmp_path):
    gemma = make_tokenizer(tmp_path / "gemma", "gemma2")
    fine = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    system = {"messages": [{"role": "system", "content": "Be brief."}, *fine["messages"]]}
    data = tmp_path / "data"
    write_jsonl(data / "a.jsonl", [fine, fine, system])
    overrides = ("data=local", f"data.path={data}", f"data.tokenizer={gemma}", "model.vocab=512", "data.format=chat")
    message = rf"data.path: {data / 'a.jsonl'}, record 3: the chat template raised: 'System role not supported'"
    with pytest.raises(ConfigError, match=message):
        tiny_plan(*overrides)
    write_jsonl(data / "a.jsonl", [fine, fine])
    assert tiny_plan(*overrides).chat_date
