"""Where a plan's tokenizer is, and what its files say, read with the standard library: the planner checks
a local tokenizer against the model before anything runs, and the trainer reads its chat template and
end-of-document token the same way (the `tokenizers` library only encodes).

A Hugging Face tokenizer folder holds `tokenizer.json` (the vocabulary and the encoding pipeline) and
`tokenizer_config.json` (the special tokens' names, and the chat template in older releases; newer ones
write it to `chat_template.jinja`).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from compiler.spec.schema import DataConfig, ModelConfig

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"


def tokenizer_location(data: DataConfig, model: ModelConfig) -> str | None:
    """The folder or s3:// prefix of the tokenizer: `data.tokenizer`, else for model=hf the checkpoint's own
    (`model.path`, which on a node names the folder it was fetched to)."""
    if data.tokenizer is None and model.family == "hf":
        return model.path
    return data.tokenizer


@dataclass(frozen=True)
class TokenizerFacts:
    vocab: int
    """Token ids run from 0 to vocab - 1 (the base vocabulary and the added tokens)."""
    eos_token: str | None
    eos_id: int | None
    chat_template: str | None
    bos_token: str | None

    @classmethod
    def read(cls, folder: Path) -> "TokenizerFacts":
        """Raises FileNotFoundError without tokenizer.json, ValueError on a file that is not a tokenizer's."""
        tokenizer = json.loads((folder / TOKENIZER_FILE).read_text())
        config_path = folder / CONFIG_FILE
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        ids = _vocabulary_ids(tokenizer)
        template_path = folder / TEMPLATE_FILE
        template = template_path.read_text() if template_path.is_file() else config.get("chat_template")
        eos, bos = _token_name(config.get("eos_token")), _token_name(config.get("bos_token"))
        return cls(
            vocab=max(ids.values()) + 1,
            eos_token=eos,
            eos_id=ids.get(eos) if eos else None,
            chat_template=template if isinstance(template, str) else None,
            bos_token=bos,
        )


def _vocabulary_ids(tokenizer: dict) -> dict[str, int]:
    """Token → id over the model's vocabulary (a mapping for BPE and WordPiece, a list of (piece, score)
    for Unigram) and the added tokens."""
    model = tokenizer.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = dict(vocab)
    elif isinstance(vocab, list):
        ids = {entry[0]: index for index, entry in enumerate(vocab)}
    else:
        raise ValueError("tokenizer.json has no model.vocab")
    ids.update({token["content"]: token["id"] for token in tokenizer.get("added_tokens", [])})
    return ids


def _token_name(value: object) -> str | None:
    """A special token as tokenizer_config.json names it: a string, or an AddedToken's {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
