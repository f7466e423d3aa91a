"""`trainer.sample_prompts` at plan time: a list of prompts or a number of held-out records' prompts travels in
the plan; what the trainer could not generate with is one line naming its key, exit status 2, nothing built."""

import pytest

from compiler.spec import Plan
from tests.helpers import plan_for
from tests.hostile import invoke


@pytest.fixture
def chat(tmp_path, hf_tokenizer) -> tuple[str, ...]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data/held_out.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    return ("data=local", f"data.path={tmp_path / 'data'}", f"data.tokenizer={hf_tokenizer}", "data.format=chat")


def test_the_plan_carries_the_prompts_or_their_count(chat):
    listed = plan_for(*chat, "trainer.sample_prompts=['Say hello','Name a colour']", "trainer.sample_max_new_tokens=8")
    assert listed.trainer.sample_prompts == ["Say hello", "Name a colour"]
    assert listed.trainer.sample_max_new_tokens == 8
    assert Plan.from_json(listed.to_json()) == listed
    counted = plan_for(*chat, "data.validation=held_out.jsonl", "trainer.sample_prompts=3")
    assert counted.trainer.sample_prompts == 3


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (("trainer.sample_prompts=[1,2]",), "trainer.sample_prompts", "a list of prompts"),
        (("trainer.sample_prompts=0",), "trainer.sample_prompts", "a list of prompts"),
        (("trainer.sample_prompts=[hi]", "trainer.sample_max_new_tokens=0"), "trainer.sample_max_new_tokens", "1"),
        (("trainer.sample_prompts=2",), "trainer.sample_prompts", "data.validation"),
        (("data.validation=0.1", "trainer.sample_prompts=2"), "trainer.sample_prompts", "data.validation"),
        (
            ("data.format=text", "data.validation=held_out.jsonl", "trainer.sample_prompts=2"),
            "trainer.sample_prompts",
            "chat",
        ),
    ],
)
def test_what_the_trainer_cannot_generate_with_is_one_line(tmp_path, chat, overrides, key, says):
    outcome = invoke(["plan", *chat, *overrides], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == [key], outcome.stderr
    assert says in outcome.stderr and not outcome.created


def test_synthetic_data_has_no_tokenizer_to_generate_with(tmp_path):
    outcome = invoke(["plan", "trainer.sample_prompts=[hi]"], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == ["trainer.sample_prompts"], outcome.stderr
    assert "tokenizer" in outcome.stderr
