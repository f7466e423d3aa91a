"""The final model's files: a model family's weights written in a checkpoint format and read back.

The trainer saves the final model through its family's adapter (`ModelSpec.weights`), so a family can
write the files another tool reads (Hugging Face's safetensors and config, say) with its own key names.
"""

import json
from pathlib import Path
from typing import Any, Protocol

import torch

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"


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
    folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any], generation_config: dict[str, Any]
) -> None:
    """TEMPORARY until the export branch lands."""
    from huggingface_hub import save_torch_state_dict

    folder.mkdir(parents=True, exist_ok=True)
    save_torch_state_dict(state, folder)
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(generation_config, indent=2))


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        state |= load_file(file)
    return state
