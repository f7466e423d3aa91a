"""`trainer.sample_prompts`: what the model says as it trains. At each evaluation (every `trainer.eval_interval`
or `eval_tasks_interval` steps, and after the last step) the model completes each prompt greedily, up to
`trainer.sample_max_new_tokens` tokens, through its chat template when the data is conversations (chat,
preference); the completions go to the log (a line each), samples.jsonl and the trackers (`write_samples`).

Rank 0 generates with transformers on the exported folder, the whole model that the export gathers from every
rank whatever the engine (DDP, FSDP2, DeepSpeed, pipeline stages), exactly what a user loads afterwards, while
the other ranks wait (`task_scores.judge`); the task scores of the same step read the same folder.
"""

from collections.abc import Sequence
from pathlib import Path

import torch

from compiler.spec import Plan
from compiler.spec.errors import printable
from compiler.spec.schema import DataFormat, TrainerConfig
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer.data import documents, prepare
from entrypoint.trainer.data.batches import data_folder
from entrypoint.trainer.metrics.base import MetricsSink, Sample

Prompt = str | list[dict]
"""A text, or a conversation (messages) that the model's next reply completes."""
CONVERSATIONS = (DataFormat.chat, DataFormat.preference)
"""The data formats whose model sees its prompts through the chat template."""
SHOWN_CHARACTERS = 160
"""A sample's line in the log shows at most this much of the prompt and of the completion's first line."""


def samples_due(trainer: TrainerConfig, done_steps: int) -> bool:
    """At each evaluation: validation's and the task scores' intervals, and after the last step."""
    if not trainer.sample_prompts:
        return False
    return done_steps == trainer.steps or any(
        interval and done_steps % interval == 0 for interval in (trainer.eval_interval, trainer.eval_tasks_interval)
    )


def prompts(plan: Plan, paths: Paths) -> list[Prompt]:
    """The prompts as given, or (a number N) the first N held-out records' prompts: a conversation up to its last
    reply, a pair's prompt."""
    wanted = plan.trainer.sample_prompts
    if isinstance(wanted, list):
        return list(wanted)
    folder = data_folder(plan, paths.channel(plan.data.channel))
    found: list[Prompt] = []
    for source in prepare.held_out_sources(plan, folder):
        for record in documents.records(source, plan.data.format, plan.data.field):
            if len(found) == wanted:
                return found
            found.append(record_prompt(record))  # a record of chat or preference data (the planner checks)
    return found


def record_prompt(record: dict) -> Prompt:
    """A conversation's messages before its last reply, or a prompt/completion record's (or a pair's) prompt."""
    if "messages" not in record:
        return record["prompt"]
    messages = record["messages"]
    replies = [index for index, message in enumerate(messages) if message.get("role") == "assistant"]
    return messages[: replies[-1]] if replies else messages


def complete(plan: Plan, folder: Path, prompts: Sequence[Prompt], step: int, device: torch.device) -> list[Sample]:
    """Each prompt completed greedily by the model in `folder` (a Hugging Face folder with its tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto").to(device).eval()
    chat = plan.data.format in CONVERSATIONS and tokenizer.chat_template is not None
    stop = tokenizer.eos_token_id
    greedy = GenerationConfig(
        max_new_tokens=plan.trainer.sample_max_new_tokens,
        do_sample=False,
        eos_token_id=stop,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop,
    )
    samples = []
    for prompt in prompts:
        if chat:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        else:
            ids = tokenizer(prompt_text(prompt), return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids.to(device), generation_config=greedy)
        completion = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        samples.append(Sample(step, prompt_text(prompt), completion))
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the copy's memory back to training, not kept by the caching allocator
    return samples


def prompt_text(prompt: Prompt) -> str:
    """A prompt as samples.jsonl and the trackers show it: the text, or a conversation's last message."""
    if isinstance(prompt, str):
        return prompt
    content = prompt[-1].get("content", "") if prompt else ""
    return content if isinstance(content, str) else str(content)


def log_samples(samples: list[Sample], sinks: Sequence[MetricsSink]) -> None:
    """A line each in the job's log (control characters escaped, the completion's first line), then the sinks."""
    for sample in samples:
        prompt = printable(sample.prompt)[:SHOWN_CHARACTERS]
        completion = printable(sample.completion.split("\n", 1)[0])[:SHOWN_CHARACTERS]
        print(f"sample {sample.step:>8}  {prompt} → {completion}", flush=True)
    for sink in sinks:
        sink.write_samples(samples)
