"""The tensors a checkpoint folder holds, by name and shape, read from its safetensors headers (the index names
the shards; only each file's header is read, never the weights): what `model.lora.targets` may name and
`model.trainable_parameters` may match.

A safetensors file starts with the length of its JSON header (8 bytes, little-endian), then the header, which
maps every tensor's name to its dtype, shape and offsets.
"""

import math
import re
from pathlib import Path

from omegaconf import DictConfig

from compiler.spec.errors import ConfigError, shown
from compiler.spec.files import FileError, decoded, json_object, read_bytes, read_json_object
from compiler.spec.schema.model import ALL_LINEAR
from compiler.spec.trainable import KEY as TRAINABLE
from compiler.spec.trainable import chosen

INDEX = "model.safetensors.index.json"
HEADER_LIMIT = 100 * 2**20
"""The largest header read (a checkpoint of thousands of tensors has a header of a few MiB)."""
IN_A_BLOCK = re.compile(r"(^|\.)\d+\.")
"""A module inside a numbered block (`model.layers.3.self_attn.q_proj`, `transformer.h.0.attn.c_attn`)."""
KEY = "model.path"


def tensor_shapes(folder: Path) -> dict[str, list[int]]:
    """Every tensor's shape by name, from the index's shards or every *.safetensors file of `folder`."""
    index = folder / INDEX
    if index.exists():
        weight_map = read_json_object(index, KEY).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise FileError(KEY, index, "has no weight_map of tensor names to file names")
        files = sorted({folder / name for name in weight_map.values()})
    else:
        files = sorted(folder.glob("*.safetensors"))
    shapes: dict[str, list[int]] = {}
    for file in files:
        shapes |= _header_shapes(file)
    return shapes


def _header_shapes(path: Path) -> dict[str, list[int]]:
    start = read_bytes(path, KEY, limit=7)
    if len(start) < 8:
        raise FileError(KEY, path, "is too short for a safetensors file")
    size = int.from_bytes(start[:8], "little")
    if size > HEADER_LIMIT:
        raise FileError(KEY, path, f"declares a header of {size:,} bytes, not a safetensors file's")
    header = read_bytes(path, KEY, limit=8 + size)[8 : 8 + size]
    entries = json_object(decoded(header, KEY, path, HEADER_LIMIT), KEY, path)
    return {
        name: entry["shape"]
        for name, entry in entries.items()
        if isinstance(entry, dict) and isinstance(entry.get("shape"), list)
    }


def linear_modules(shapes: dict[str, list[int]]) -> list[str]:
    """The names of the blocks' linear layers (each module's last name, once): its 2-D weights."""
    names = set()
    for tensor, shape in shapes.items():
        module, _, parameter = tensor.rpartition(".")
        if parameter == "weight" and len(shape) == 2 and IN_A_BLOCK.search(module):
            names.add(module.rpartition(".")[2])
    return sorted(names)


def check_lora_targets(model: DictConfig, folder: Path) -> None:
    """`model.lora.targets` against the checkpoint's modules, for every architecture: each must name one of
    its linear layers (as peft matches a name: the module's name, or a dotted tail of its path), and
    [all-linear] becomes the list of them, which the plan then records."""
    if not isinstance(model.lora.rank, int) or model.lora.rank <= 0:  # off, or a value the planner refuses
        return
    shapes = tensor_shapes(folder)
    if not shapes:  # weights in another format (pytorch_model.bin): peft matches the names on the nodes
        return
    linear = linear_modules(shapes)
    targets = list(model.lora.targets)
    if targets == [ALL_LINEAR]:
        model.lora.targets = linear
        return
    modules = {tensor.rpartition(".")[0] for tensor in shapes}
    for target in targets:
        if not any(module == target or module.endswith(f".{target}") for module in modules):
            raise ConfigError(
                "model.lora.targets",
                f"{shown(target)} names no module of {folder} (its linear layers: {', '.join(linear) or 'none'})",
                f"choose among {', '.join(linear)}, or [{ALL_LINEAR}]",
            )


def count_trainable(model: DictConfig, folder: Path) -> None:
    """`model.trainable_parameters` against the checkpoint's tensor names: a pattern that matches none is refused
    (a recipe's pattern for another architecture would otherwise freeze what it meant to train), and the
    parameters they choose are counted into `model.trainable_count` for the memory estimate."""
    if not model.trainable_parameters or model.lora.rank:  # LoRA with them is refused by the planner
        return
    shapes = tensor_shapes(folder)
    if not shapes:  # weights in another format: the trainer checks the names on the nodes
        return
    try:
        names, unmatched = chosen(list(model.trainable_parameters), shapes)
    except ValueError as error:
        raise ConfigError(TRAINABLE, str(error), "give regular expressions over parameter names") from None
    if unmatched:
        example = next((name for name in sorted(shapes) if IN_A_BLOCK.search(name)), min(shapes))
        raise ConfigError(
            TRAINABLE,
            f"{shown(unmatched[0])} matches no tensor of {folder} (its names read like {example})",
            "match the checkpoint's names from their start, as axolotl's unfrozen_parameters does",
        )
    model.trainable_count = sum(math.prod(shapes[name]) for name in names)
