"""Where a plan's tokenizer is, and what its files say, read with the standard library: the planner checks
a local tokenizer against the model before anything runs, and the trainer reads its chat template and
end-of-document token the same way (the `tokenizers` library only encodes).

A Hugging Face tokenizer folder holds `tokenizer.json` (the vocabulary and the encoding pipeline) and
`tokenizer_config.json` (the special tokens' names, and the chat template in older releases: a string, or a
list of named templates; newer ones write it to `chat_template.jinja` and the other named templates to
`additional_chat_templates/<name>.jinja`).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from compiler.spec.schema import DataConfig, ModelConfig

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATES_DIR = "additional_chat_templates"
DEFAULT_TEMPLATE = "default"


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
    chat_templates: dict[str, str]
    """The chat templates by name, as transformers reads them (the one template of most tokenizers is `default`)."""
    bos_token: str | None

    @property
    def chat_template(self) -> str | None:
        """The template a conversation without tools is rendered with (transformers' choice)."""
        return self.chat_templates.get(DEFAULT_TEMPLATE)

    @classmethod
    def read(cls, folder: Path) -> "TokenizerFacts":
        """Raises FileNotFoundError without tokenizer.json, ValueError on a file that is not a tokenizer's."""
        tokenizer = json.loads((folder / TOKENIZER_FILE).read_text())
        config_path = folder / CONFIG_FILE
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        ids = _vocabulary_ids(tokenizer)
        eos, bos = _token_name(config.get("eos_token")), _token_name(config.get("bos_token"))
        return cls(
            vocab=max(ids.values()) + 1,
            eos_token=eos,
            eos_id=ids.get(eos) if eos else None,
            chat_templates=_chat_templates(folder, config.get("chat_template")),
            bos_token=bos,
        )


def _chat_templates(folder: Path, configured: object) -> dict[str, str]:
    """`chat_template.jinja` and `additional_chat_templates/*.jinja`, else tokenizer_config.json's
    `chat_template`: a string, a list of {"name", "template"}, or a mapping of names to templates."""
    if (folder / TEMPLATE_FILE).is_file():
        extra = sorted((folder / TEMPLATES_DIR).glob("*.jinja"))
        return {DEFAULT_TEMPLATE: (folder / TEMPLATE_FILE).read_text(), **{p.stem: p.read_text() for p in extra}}
    if isinstance(configured, str):
        return {DEFAULT_TEMPLATE: configured}
    if isinstance(configured, list):
        configured = {item.get("name"): item.get("template") for item in configured if isinstance(item, dict)}
    if isinstance(configured, dict):
        return {name: text for name, text in configured.items() if isinstance(name, str) and isinstance(text, str)}
    return {}


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
