"""The row shapes recipes' datasets come in, read as the two records dockyard trains on: a conversation
(`messages`, or `prompt` and `completion`) for `data.format=chat`, and a pair (`prompt`, `chosen`, `rejected`)
for `data.format=preference`.

- alpaca (`instruction`, `input` optional, `output`; axolotl's `type: alpaca`): the Stanford Alpaca prompt
  around the instruction and input, and the output as the completion, joined as text (no chat template), the
  loss on the output, as axolotl trains it.
- ShareGPT (`conversations`: a list of {from, value}; axolotl's `chat_template` type with `role: from` and
  `content: value`): a conversation, the roles named as FastChat names them mapped to the template's.
- a pair whose prompt is a conversation and whose completions are one reply each, a message or its text (axolotl's
  `chat_template.default` DPO rows): each completion a one-message list.
- a pair with an implicit prompt (`chosen` and `rejected` conversations that start alike, as UltraFeedback's
  rows): the messages they share first are the prompt, the rest of each its completion (TRL's rule).
"""

ALPACA_COLUMNS = ("instruction", "input", "output")
SHAREGPT_COLUMN = "conversations"
ALPACA_PREAMBLE = (
    "Below is an instruction that describes a task{}. Write a response that appropriately completes the request.\n\n"
)
ALPACA_INPUT = ", paired with an input that provides further context"
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}
"""ShareGPT's `from` → the role a chat template reads."""


def alpaca(row: dict) -> dict | None:
    """An alpaca row as a text prompt and completion; None when the row is not one."""
    instruction, given, output = (row.get(name) for name in ALPACA_COLUMNS)
    if not isinstance(instruction, str) or not isinstance(output, str):
        return None
    if isinstance(given, str) and given:
        prompt = ALPACA_PREAMBLE.format(ALPACA_INPUT) + f"### Instruction:\n{instruction}\n\n### Input:\n{given}\n\n"
    else:
        prompt = ALPACA_PREAMBLE.format("") + f"### Instruction:\n{instruction}\n\n"
    return {"prompt": prompt + "### Response:\n", "completion": output}


def sharegpt(row: dict, where: str) -> dict | None:
    """A ShareGPT row as a conversation; None when the row has no `conversations` list."""
    turns = row.get(SHAREGPT_COLUMN)
    if not isinstance(turns, list):
        return None
    messages = []
    for number, turn in enumerate(turns, 1):
        speaker = turn.get("from") if isinstance(turn, dict) else None
        if speaker not in SHAREGPT_ROLES or not isinstance(turn.get("value"), str):
            raise ValueError(
                f"{where}: conversations[{number}] is not a ShareGPT turn: 'from' one of "
                f"{', '.join(SHAREGPT_ROLES)} and a 'value' text"
            )
        messages.append({"role": SHAREGPT_ROLES[speaker], "content": turn["value"]})
    return {"messages": messages}


def implicit_prompt(chosen: list, rejected: list, where: str) -> dict:
    """A pair of conversations as a prompt (the messages both start with) and two completions."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if not shared or shared == len(chosen) or shared == len(rejected):
        raise ValueError(
            f"{where}: 'chosen' and 'rejected' without a 'prompt' must start with the same messages (the prompt) "
            "and each go on with its own reply"
        )
    return {"prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}


def reply(completion: object) -> object:
    """A completion after a conversation's prompt as a message list: one message, or a text as the assistant's."""
    if isinstance(completion, dict):
        return [completion]
    return [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
