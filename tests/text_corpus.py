"""A small corpus and a tokenizer made at test time (nothing is downloaded): sentences of a tiny grammar,
learnable within a few steps, as JSONL (plain, gzip, zstd), text files, Parquet, a `datasets` folder and chat
conversations; a byte-level BPE tokenizer trained on them, with an end-of-text token and a chat template."""

import gzip
import json
import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
SUBJECTS = ["the cat", "a dog", "the bird", "my friend", "the teacher", "a child"]
VERBS = ["sees", "likes", "follows", "finds", "draws", "counts"]
OBJECTS = ["the ball", "a tree", "the river", "two stars", "the red box", "a small house"]


def sentences(count: int, seed: int) -> list[str]:
    draw = random.Random(seed)
    return [f"{draw.choice(SUBJECTS)} {draw.choice(VERBS)} {draw.choice(OBJECTS)}." for _ in range(count)]


def documents(count: int, seed: int = 0) -> list[str]:
    """Documents of 2-6 sentences."""
    draw = random.Random(seed)
    return [" ".join(sentences(draw.randint(2, 6), seed * 100_003 + index)) for index in range(count)]


def conversations(count: int, seed: int = 0) -> list[list[dict]]:
    """A question and an answer that repeats it in a fixed pattern (learnable), sometimes after a system line."""
    result = []
    for index, question in enumerate(sentences(count, seed)):
        messages = [{"role": "user", "content": f"say: {question}"}, {"role": "assistant", "content": question}]
        result.append(([{"role": "system", "content": "be brief."}] if index % 3 == 0 else []) + messages)
    return result


def train_tokenizer(folder: Path, vocab: int = 512, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = documents(200, seed=99) + [m["content"] for c in conversations(50, seed=99) for m in c]
    tokenizer.train_from_iterator(corpus, trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>")
    if chat_template:
        wrapped.chat_template = chat_template
    wrapped.save_pretrained(str(folder))
    return folder


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(lines.encode()))
    elif path.name.endswith(".zst"):
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    else:
        path.write_text(lines)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_dataset(folder: Path, rows: list[dict]) -> Path:
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return folder
