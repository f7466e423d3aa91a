"""The built-in decoder's final model in Hugging Face format: `GPT2LMHeadModel` for the GPT-2 shape,
`LlamaForCausalLM` for the Llama shape (`compiler.spec.transformers_export` says which), loadable by
`transformers.AutoModelForCausalLM.from_pretrained` with the same logits; any other shape keeps `TorchFile`.

The config is written as a plain dict, so the image needs no transformers to export. Two differences in
layout besides the names: GPT-2's `Conv1D` stores weights as [in, out] with q, k and v in one `c_attn`;
Llama's RoPE rotates the two halves of a head (`rotate_half`) where the built-in rotates neighbouring pairs,
so the q and k rows of every head are reordered: pair i's two rows become rows i and i + head_dim / 2.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from compiler.spec import ModelConfig, files
from compiler.spec.plan import model_from_dict
from compiler.spec.transformers_export import GPT2, LLAMA, transformers_architecture
from entrypoint.trainer.models.weights import CONFIG_FILE, SHARD_SIZE, TorchFile, load_safetensors, save_safetensors

GENERATION_CONFIG = {
    "_from_model_config": True,
    "output_attentions": False,
    "output_hidden_states": False,
    "use_cache": True,
}
"""What `GenerationConfig.from_model_config` writes for these configs, without its version stamp: no bos or eos
token, which a built-in model trained on token ids does not know."""


@dataclass(frozen=True)
class Names:
    """One architecture's parameter names: the built-in's outside the blocks → its own, and inside a block,
    module → module under `layer_prefix` + the block's index."""

    outer: dict[str, str]
    layer_prefix: str
    layer: dict[str, str]

    def to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {self._hf_name(name): value for name, value in state.items()}

    def from_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {self._own_name(name): value for name, value in state.items()}

    def _hf_name(self, name: str) -> str:
        if name in self.outer:
            return self.outer[name]
        _, index, rest = name.split(".", 2)  # blocks.<index>.<module>.<parameter>
        module, parameter = rest.rsplit(".", 1)
        return f"{self.layer_prefix}{index}.{self.layer[module]}.{parameter}"

    def _own_name(self, name: str) -> str:
        outer = {theirs: ours for ours, theirs in self.outer.items()}
        if name in outer:
            return outer[name]
        index, rest = name.removeprefix(self.layer_prefix).split(".", 1)
        module, parameter = rest.rsplit(".", 1)
        layer = {theirs: ours for ours, theirs in self.layer.items()}
        return f"blocks.{index}.{layer[module]}.{parameter}"


GPT2_NAMES = Names(
    outer={
        "embed.weight": "transformer.wte.weight",
        "positions.weight": "transformer.wpe.weight",
        "norm.weight": "transformer.ln_f.weight",
        "norm.bias": "transformer.ln_f.bias",
        "head.weight": "lm_head.weight",
    },
    layer_prefix="transformer.h.",
    layer={
        "attention_norm": "ln_1",
        "attention.qkv": "attn.c_attn",  # q, k and v concatenated (see `_gpt2_to_hf`)
        "attention.o": "attn.c_proj",
        "mlp_norm": "ln_2",
        "mlp.up": "mlp.c_fc",
        "mlp.down": "mlp.c_proj",
    },
)

LLAMA_NAMES = Names(
    outer={
        "embed.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "head.weight": "lm_head.weight",
    },
    layer_prefix="model.layers.",
    layer={
        "attention_norm": "input_layernorm",
        "attention.q": "self_attn.q_proj",
        "attention.k": "self_attn.k_proj",
        "attention.v": "self_attn.v_proj",
        "attention.o": "self_attn.o_proj",
        "mlp_norm": "post_attention_layernorm",
        "mlp.gate": "mlp.gate_proj",
        "mlp.up": "mlp.up_proj",
        "mlp.down": "mlp.down_proj",
    },
)


def _gpt2_to_hf(state: dict[str, torch.Tensor], model: ModelConfig) -> dict[str, torch.Tensor]:
    fused = dict(state)
    for index in range(model.layers):
        for parameter in ("weight", "bias"):
            parts = [fused.pop(f"blocks.{index}.attention.{proj}.{parameter}") for proj in "qkv"]
            fused[f"blocks.{index}.attention.qkv.{parameter}"] = torch.cat(parts)
    return {name: _conv1d(name, value) for name, value in GPT2_NAMES.to_hf(fused).items()}


def _gpt2_from_hf(state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    ours = GPT2_NAMES.from_hf({name: _conv1d(name, value) for name, value in state.items()})
    for index in range(config["n_layer"]):
        for parameter in ("weight", "bias"):
            fused = ours.pop(f"blocks.{index}.attention.qkv.{parameter}")
            for proj, part in zip("qkv", fused.chunk(3), strict=True):
                ours[f"blocks.{index}.attention.{proj}.{parameter}"] = part
    return ours


def _conv1d(name: str, value: torch.Tensor) -> torch.Tensor:
    """GPT-2's linear layers inside the blocks are `Conv1D`s, whose weight is the transpose of `nn.Linear`'s
    (the transpose is its own inverse)."""
    return value.t() if name.startswith(GPT2_NAMES.layer_prefix) and value.dim() == 2 else value


def _gpt2_config(model: ModelConfig) -> dict[str, Any]:
    return {
        "model_type": "gpt2",
        "n_positions": model.context,
        "n_embd": model.hidden,
        "n_layer": model.layers,
        "n_head": model.heads,
        "n_inner": model.ffn_hidden,
        "activation_function": "gelu_pytorch_tanh",  # F.gelu(approximate="tanh"), the built-in MLP's own call
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
    }


def _llama_to_hf(state: dict[str, torch.Tensor], model: ModelConfig) -> dict[str, torch.Tensor]:
    halves = {
        name: _rope_rows(name, value, model.heads, model.kv_heads, _halves_from_pairs) for name, value in state.items()
    }
    return LLAMA_NAMES.to_hf(halves)


def _llama_from_hf(state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    ours = LLAMA_NAMES.from_hf(state)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    return {name: _rope_rows(name, value, heads, kv_heads, _pairs_from_halves) for name, value in ours.items()}


def _rope_rows(
    name: str, value: torch.Tensor, heads: int, kv_heads: int, reorder: Callable[[torch.Tensor, int], torch.Tensor]
) -> torch.Tensor:
    """Reorder the rows of a q or k projection (weight or bias, the built-in's name) head by head."""
    if ".attention.q." in name:
        return reorder(value, heads)
    if ".attention.k." in name:
        return reorder(value, kv_heads)
    return value


def _halves_from_pairs(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """Per head, rows (r0, r1, r2, r3, …) → (r0, r2, …, r1, r3, …): pair i's rows go to i and i + half."""
    return rows.reshape(heads, -1, 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape).contiguous()


def _pairs_from_halves(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of `_halves_from_pairs`."""
    return rows.reshape(heads, 2, -1, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape).contiguous()


def _llama_config(model: ModelConfig) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": model.hidden,
        "intermediate_size": model.ffn_hidden,
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads,
        "head_dim": model.hidden // model.heads,
        "hidden_act": "silu",
        "max_position_embeddings": model.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": model.rope_theta,  # transformers before 5 reads this, 5 reads rope_parameters
        "rope_parameters": {"rope_type": "default", "rope_theta": model.rope_theta},
        "attention_bias": model.bias,
        "mlp_bias": model.bias,
        "attention_dropout": 0.0,
    }


EXPORTS = {
    GPT2: (_gpt2_to_hf, _gpt2_from_hf, _gpt2_config),
    LLAMA: (_llama_to_hf, _llama_from_hf, _llama_config),
}
"""Architecture → (the built-in's state in its names, back to the built-in's names, its own config.json keys)."""


class DecoderWeights:
    """The built-in decoder's weights format: Hugging Face's layout when its shape has a transformers
    architecture, `TorchFile` otherwise (the planner warns of that)."""

    def __init__(self, shard_size: int | str = SHARD_SIZE) -> None:
        self.shard_size = shard_size

    def save(self, folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        model = model_from_dict(config)
        architecture = transformers_architecture(model)
        if architecture is None:
            TorchFile().save(folder, state, config)
            return
        to_hf, _, hf_config = EXPORTS[architecture]
        shared = {
            "architectures": [architecture],
            "vocab_size": model.vocab,
            "tie_word_embeddings": model.tied_embeddings,
            "bos_token_id": None,  # no tokenizer's ids are known to the built-in model
            "eos_token_id": None,
            "dtype": str(state["embed.weight"].dtype).removeprefix("torch."),
        }
        save_safetensors(folder, to_hf(state, model), shared | hf_config(model), GENERATION_CONFIG, self.shard_size)

    def load(self, folder: Path) -> dict[str, torch.Tensor]:
        """The weights under the trainer's names, from either layout (its config.json says which)."""
        config = files.read_json_object(folder / CONFIG_FILE, "model.path")
        if "architectures" not in config:
            return TorchFile().load(folder)
        _, from_hf, _ = EXPORTS[config["architectures"][0]]
        return from_hf(load_safetensors(folder), config)
