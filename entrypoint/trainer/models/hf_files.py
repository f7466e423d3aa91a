"""A Hugging Face checkpoint folder, read and written: `model=hf` reads its weights by name (only the tensors
asked for) and writes the trained model back as a folder `transformers` (and vLLM) load, with the source's
config and tokenizer files, and with LoRA the merged model plus the adapter `peft` loads (a quantized base's
adapters merged into the source's own, unquantized weights). The weights are written as `save_pretrained`
writes them (`conversion.original_format`: an MoE's experts one by one).
"""

from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from compiler.spec import files
from entrypoint.trainer.models.conversion import meta_model, original_format
from entrypoint.trainer.models.weights import (
    GENERATION_CONFIG_FILE,
    copy_tokenizer,
    load_safetensors,
    save_safetensors,
)

ADAPTER_FOLDER = "adapter"
PEFT_PREFIX = "base_model.model."


def checkpoint_name(name: str) -> str:
    """A parameter's name in the checkpoint: the plain model's, without peft's wrapper (`base_model.model.`,
    `<linear>.base_layer.weight`)."""
    return name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def is_adapter(name: str) -> bool:
    return ".lora_" in name


def checkpoint_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights")
    return files


def checkpoint_names(folder: Path) -> set[str]:
    """The tensors' names in every safetensors file of `folder` (headers only)."""
    names: set[str] = set()
    for file in checkpoint_files(folder):
        with safe_open(file, framework="pt") as weights:
            names.update(weights.keys())
    return names


def read_tensor(folder: Path, name: str) -> torch.Tensor:
    """One tensor, read alone from whichever file holds it."""
    for file in checkpoint_files(folder):
        with safe_open(file, framework="pt") as weights:
            held = weights.keys()  # a list: safe_open's handle has no `in`
            if name in held:
                return weights.get_tensor(name)
    raise KeyError(f"{folder} holds no tensor {name}")


def merged_weights(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """peft-named weights → the plain model's, each adapted linear's weight + scale × B·A."""
    merged = {}
    for name, value in state.items():
        if is_adapter(name):
            continue
        plain = checkpoint_name(name)
        if ".base_layer.weight" in name:
            owner = name.removesuffix(".base_layer.weight")
            down, up = _adapter_pair(state, owner)
            value = value + scale * (up.float() @ down.float()).to(value.dtype)
        merged[plain] = value
    return merged


def with_source_weights(state: dict[str, torch.Tensor], source: Path) -> dict[str, torch.Tensor]:
    """A quantized base's trainer state (`quantized`: its frozen linear layers' weights are left out) completed
    with those weights read unquantized from the source checkpoint, under the names the state would give them
    (peft's `<linear>.base_layer.weight` where an adapter sits beside, to be merged into)."""
    present = {checkpoint_name(name) for name in state if not is_adapter(name)}
    adapted = {name.split(".lora_A.")[0] for name in state if ".lora_A." in name}
    dtype = next(value.dtype for name, value in state.items() if not is_adapter(name))
    filled = dict(state)
    for name in meta_model(source).state_dict().keys() - present:
        owner = PEFT_PREFIX + name.removesuffix(".weight")
        key = f"{owner}.base_layer.weight" if owner in adapted else PEFT_PREFIX + name
        filled[key] = read_tensor(source, name).to(dtype)
    return filled


def _adapter_pair(state: dict[str, torch.Tensor], owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    (a_name,) = (name for name in state if name.startswith(f"{owner}.lora_A.") and name.endswith(".weight"))
    return state[a_name], state[a_name.replace(".lora_A.", ".lora_B.")]


def adapter_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters as peft saves them: its names without the adapter's name (`lora_A.default.weight` →
    `lora_A.weight`)."""
    return {name.replace(".default.", "."): value.contiguous() for name, value in state.items() if is_adapter(name)}


class PretrainedFiles:
    """The `hf` family's `WeightsFormat`: the plan's `model` section says where the source checkpoint is
    (its config, generation config and tokenizer are copied) and whether LoRA trained."""

    def save(self, folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        source = Path(config["path"])
        hf_config = files.read_json_object(source / "config.json", "model.path")
        hf_config["dtype"] = str(next(iter(state.values())).dtype).removeprefix("torch.")
        generation = source / GENERATION_CONFIG_FILE
        generation_config = files.read_json_object(generation, "model.path") if generation.exists() else {}
        lora = config["lora"]
        if lora["rank"] and lora["quantize_base"] != "none":
            state = with_source_weights(state, source)
        weights = merged_weights(state, lora["alpha"] / lora["rank"]) if lora["rank"] else state
        save_safetensors(folder, original_format(weights, meta_model(source)), hf_config, generation_config)
        copy_tokenizer(source, folder)
        if lora["rank"]:
            self._save_adapter(folder / ADAPTER_FOLDER, state, config)

    @staticmethod
    def _save_adapter(folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        from peft import LoraConfig
        from safetensors.torch import save_file

        lora = config["lora"]
        folder.mkdir(parents=True, exist_ok=True)
        LoraConfig(
            r=lora["rank"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=list(lora["targets"]),
            task_type="CAUSAL_LM",
            base_model_name_or_path="..",
        ).save_pretrained(folder)
        weights = folder / "adapter_model.safetensors"
        save_file(adapter_weights(state), weights)
        weights.chmod(0o644)  # as the model's own files (safetensors writes 0600)

    def load(self, folder: Path) -> dict[str, torch.Tensor]:
        return load_safetensors(folder)
