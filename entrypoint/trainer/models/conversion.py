"""A checkpoint's names and layout against the model's, through transformers' own conversion mapping
(`transformers.conversion_mapping`, the `WeightConverter`s of `core_model_loading`).

transformers 5 holds a mixture of experts fused (`mlp.experts.gate_up_proj`, `[experts, 2·ffn, hidden]`) while
the Hub's checkpoints name each expert's tensors apart (`mlp.experts.7.gate_proj.weight`, Mixtral's
`block_sparse_moe.experts.7.w1.weight`); `from_pretrained` converts on load and `save_pretrained` back on save.
Here a checkpoint key is renamed by the same mapping; a key a converter claims (an expert's tensor) is read
only for the experts a rank holds and fused by the converter's own operations. A checkpoint saved fused
(`save_original_format=False`) needs no converter: its names are the model's.
"""

import re
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch import nn


@dataclass
class CheckpointMap:
    """The model's names → where the checkpoint holds them."""

    renamed: dict[str, str] = field(default_factory=dict)
    """A model name → the one checkpoint tensor it is (renamed, perhaps to itself)."""
    converted: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """A model name → the (source pattern, checkpoint key) pairs a converter fuses into it."""
    converters: dict[str, object] = field(default_factory=dict)
    """A source pattern → its `WeightConverter`."""

    def __contains__(self, name: str) -> bool:
        return name in self.renamed or name in self.converted


def checkpoint_map(model: nn.Module, keys: set[str]) -> CheckpointMap:
    """Each checkpoint key renamed as `from_pretrained` renames it for `model` (the plain transformers model)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    transforms = get_model_conversion_mapping(model)
    renamings = [entry for entry in transforms if isinstance(entry, WeightRenaming)]
    converters = [entry for entry in transforms if isinstance(entry, WeightConverter)]
    mapping = CheckpointMap(converters={pattern: entry for entry in converters for pattern in entry.source_patterns})
    for key in sorted(keys):
        target, pattern = rename_source_key(key, renamings, converters)
        if pattern is None:
            mapping.renamed[target] = key
        else:
            mapping.converted.setdefault(target, []).append((pattern, key))
    return mapping


def expert_index(pattern: str, key: str) -> int:
    """The expert a per-expert checkpoint key names: the number where its source pattern has `*`."""
    found = re.search(re.escape(pattern).replace(r"\*", r"(\d+)"), key)
    if found is None:
        raise KeyError(f"checkpoint key {key} does not match {pattern}")
    return int(found.group(1))


def converted_tensor(
    mapping: CheckpointMap, model: nn.Module, name: str, experts: range, read: Callable[[str], torch.Tensor]
) -> torch.Tensor:
    """The fused tensor `name` for `experts` only (its first dimension), its per-expert pieces read by `read`
    and fused by transformers' converter (stacking the experts, concatenating gate and up)."""
    pieces = mapping.converted[name]
    converter = deepcopy(mapping.converters[pieces[0][0]])
    chosen = sorted(((expert_index(pattern, key), pattern, key) for pattern, key in pieces), key=lambda item: item[0])
    for index, pattern, key in chosen:
        if index in experts:
            converter.add_tensor(name, key, pattern, partial(read, key))
    (fused,) = converter.convert(name, model=model, config=model.config).values()
    return fused


def original_format(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights named and laid out as `save_pretrained` writes them (per-expert tensors for an MoE), each in
    its own storage (safetensors refuses views of a larger tensor, as splitting the fused experts gives)."""
    from transformers.core_model_loading import revert_weight_conversion

    return {name: _own_storage(value) for name, value in revert_weight_conversion(model, state).items()}


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    whole = tensor.is_contiguous() and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    return tensor if whole else tensor.clone(memory_format=torch.contiguous_format)


def meta_model(folder: Path) -> nn.Module:
    """transformers' model of the checkpoint in `folder`, without storage: its conversion mapping's key."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
