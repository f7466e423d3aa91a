"""The final model's files: a model family's weights written in a checkpoint format and read back.

The trainer saves the final model through its family's adapter (`ModelSpec.weights`), so a family can
write the files another tool reads (Hugging Face's safetensors and config, say) with its own key names.
`save_safetensors` and `load_safetensors` are that layout for any family: the family maps its names and
config to those of its transformers architecture, these write and read the files.
"""

import json
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
from huggingface_hub import save_torch_state_dict
from safetensors.torch import load_file

from compiler.spec.checkpoint_files import SAFETENSORS_FILE, SAFETENSORS_INDEX, shard_names

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
SHARD_SIZE = "5GB"
"""Hugging Face's default: a larger model is split into shards of at most this size, with an index."""
PARTIAL = ".partial"
"""The folder inside the model folder that a Hugging Face export is written into before it moves into place.
Inside, not beside: the model folder may be a mount point (SageMaker's /opt/ml/model), which cannot be
renamed, and a sibling may be another file system."""


class WeightsFormat(Protocol):
    def save(self, folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        """Write the whole model's weights (the trainer's names) and its `model` config section into `folder`."""
        ...

    def load(self, folder: Path) -> dict[str, torch.Tensor]:
        """The weights `save` wrote, under the trainer's names."""
        ...


class TorchFile:
    """The trainer's own state dict, unchanged, in `model.pt` (written whole, then renamed into place), and
    the plan's `model` section in `config.json`."""

    def save(self, folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / (MODEL_FILE + ".tmp")
        torch.save(state, partial)
        partial.rename(folder / MODEL_FILE)
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))

    def load(self, folder: Path) -> dict[str, torch.Tensor]:
        return torch.load(folder / MODEL_FILE, weights_only=True)


def save_safetensors(
    folder: Path,
    state: dict[str, torch.Tensor],
    config: dict[str, Any],
    generation_config: dict[str, Any],
    shard_size: int | str = SHARD_SIZE,
) -> None:
    """Write a transformers model folder: `config.json`, `generation_config.json` and the weights, as
    `model.safetensors` or, above `shard_size`, as shards with `model.safetensors.index.json`.

    `state` has the transformers architecture's names; tensors that share storage (tied embeddings) are
    written once. The files are written in a `.partial` folder and moved into `folder` with the file that
    makes it loadable (the single weights file or the index) last, after removing a previous export's: a
    crash leaves a folder that no reader takes for a complete model.
    """
    partial = folder / PARTIAL
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_torch_state_dict(state, partial, max_shard_size=shard_size)
    (partial / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
    (partial / GENERATION_CONFIG_FILE).write_text(json.dumps(generation_config, indent=2, sort_keys=True))
    complete = SAFETENSORS_INDEX if (partial / SAFETENSORS_INDEX).exists() else SAFETENSORS_FILE
    for stale in (folder / SAFETENSORS_INDEX, folder / SAFETENSORS_FILE, *folder.glob("model-*.safetensors")):
        stale.unlink(missing_ok=True)
    for written in sorted(partial.iterdir(), key=lambda path: path.name == complete):
        written.chmod(0o644)  # safetensors writes 0600; servers and the next run read as other users
        written.rename(folder / written.name)
    partial.rmdir()


def load_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """The state dict `save_safetensors` wrote (transformers' names), from one file or every shard in the index;
    a tied tensor written once appears once."""
    index = folder / SAFETENSORS_INDEX
    if not index.exists():
        return load_file(folder / SAFETENSORS_FILE)
    state: dict[str, torch.Tensor] = {}
    for shard in shard_names(index):
        state |= load_file(folder / shard)
    return state


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)
"""What a Hugging Face tokenizer folder may hold (fast and slow tokenizers, the chat template)."""


def copy_tokenizer(source: Path, folder: Path) -> None:
    """The tokenizer files of `source` into a model folder, so that AutoTokenizer loads it from there."""
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, folder / name)
            (folder / name).chmod(0o644)
