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

from compiler.spec import files
from compiler.spec.errors import as_json
from compiler.spec.schema import DataConfig, ModelConfig

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATES_DIR = "additional_chat_templates"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
"""Older saves' special tokens, which transformers reads beside tokenizer_config.json's."""
DEFAULT_TEMPLATE = "default"
MAX_RENDERED = 2**24
"""The most characters a chat template may write for one record (16 Mi: a conversation of millions of tokens),
checked at plan time on the first records and on the nodes on every one."""


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
    def read(cls, folder: Path, key: str = "data.tokenizer", data: DataConfig | None = None) -> "TokenizerFacts":
        """The facts of the tokenizer in `folder`, with `data.chat_template` and `data.eos_token` in place of its
        own where they are set; a file that is not a tokenizer's is a FileError naming `key`."""
        tokenizer_path, config_path = folder / TOKENIZER_FILE, folder / CONFIG_FILE
        tokenizer = files.read_json_object(tokenizer_path, key, files.LARGE_FILE)
        config = files.read_json_object(config_path, key) if _present(config_path) else {}
        ids = _vocabulary_ids(tokenizer, key, tokenizer_path)
        eos, bos = _token_name(config.get("eos_token")), _token_name(config.get("bos_token"))
        templates = _chat_templates(folder, config.get("chat_template"), key)
        if data is not None and data.eos_token is not None:
            eos = data.eos_token
        if data is not None and data.chat_template is not None:
            templates[DEFAULT_TEMPLATE] = data.chat_template
        return cls(
            vocab=max(ids.values(), default=-1) + 1,
            eos_token=eos,
            eos_id=ids.get(eos) if eos else None,
            chat_templates=templates,
            bos_token=bos,
        )


def replace_tokens(folder: Path, data: DataConfig) -> None:
    """Writes `data.chat_template` and `data.eos_token` into the tokenizer files of `folder` (a copy: the node's
    tokenizer, the exported model's), so that transformers loads them as the tokenizer's own: the template as
    `chat_template.jinja` (tokenizer_config.json's templates moved beside it), the token as `eos_token`."""
    if data.chat_template is None and data.eos_token is None:
        return
    config_path = folder / CONFIG_FILE
    config = files.read_json_object(config_path, "data.tokenizer") if _present(config_path) else {}
    if data.chat_template is not None:
        named = _chat_templates(folder, config.pop("chat_template", None), "data.tokenizer")
        named.pop(DEFAULT_TEMPLATE, None)
        if named:
            (folder / TEMPLATES_DIR).mkdir(exist_ok=True)
        for name, text in named.items():
            (folder / TEMPLATES_DIR / f"{name}.jinja").write_text(text)
        (folder / TEMPLATE_FILE).write_text(data.chat_template)
    if data.eos_token is not None:
        config["eos_token"] = data.eos_token
        special_path = folder / SPECIAL_TOKENS_FILE
        if special_path.is_file():
            special = files.read_json_object(special_path, "data.tokenizer")
            special_path.write_text(json.dumps(special | {"eos_token": data.eos_token}, indent=2))
    config_path.write_text(json.dumps(config, indent=2))


def _chat_templates(folder: Path, configured: object, key: str) -> dict[str, str]:
    """`chat_template.jinja` and `additional_chat_templates/*.jinja`, else tokenizer_config.json's
    `chat_template`: a string, a list of {"name", "template"}, or a mapping of names to templates."""
    if _present(folder / TEMPLATE_FILE):
        extra = sorted((folder / TEMPLATES_DIR).glob("*.jinja"))
        named = {p.stem: files.read_text(p, key) for p in extra}
        return {DEFAULT_TEMPLATE: files.read_text(folder / TEMPLATE_FILE, key), **named}
    if isinstance(configured, str):
        return {DEFAULT_TEMPLATE: configured}
    if isinstance(configured, list):
        configured = {item.get("name"): item.get("template") for item in configured if isinstance(item, dict)}
    if isinstance(configured, dict):
        return {name: text for name, text in configured.items() if isinstance(name, str) and isinstance(text, str)}
    return {}


def _present(path: Path) -> bool:
    """A file the folder has, or a link (one to nothing is the reader's to report)."""
    return path.exists() or path.is_symlink()


def _vocabulary_ids(tokenizer: dict, key: str, path: Path) -> dict[str, int]:
    """Token → id over the model's vocabulary (a mapping for BPE and WordPiece, a list of (piece, score)
    for Unigram) and the added tokens; every id a whole number ≥ 0."""
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids = dict(vocab)
    elif isinstance(vocab, list) and all(isinstance(entry, list) and entry for entry in vocab):
        ids = {entry[0]: index for index, entry in enumerate(vocab)}
    else:
        raise files.FileError(
            key, path, "has no model.vocab (a mapping or a list of pieces)", "save it with save_pretrained"
        )
    added = tokenizer.get("added_tokens", [])
    if not isinstance(added, list) or not all(isinstance(token, dict) for token in added):
        raise files.FileError(key, path, "gives added_tokens that are not a list of objects")
    for index, token in enumerate(added):
        ids[token.get("content")] = files.integer(token, "id", key, f"{path} added_tokens[{index}]", minimum=0)
    for token, number in ids.items():
        if not isinstance(token, str) or type(number) is not int or number < 0:
            raise files.FileError(
                key, path, f"gives the token {as_json(token)} the id {as_json(number)}, not a whole number ≥ 0"
            )
    return ids


def _token_name(value: object) -> str | None:
    """A special token as tokenizer_config.json names it: a string, or an AddedToken's {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
