"""Hugging Face decoder architectures the planner knows by `model_type`: how a checkpoint's config.json maps
onto `ModelConfig`'s shape, and what its parameter count needs beyond that shape (which projections carry
biases, per-head norms, how many norms a layer has). Facts read from transformers' modeling files (5.x); the
conformance test builds each one with transformers and holds the counts to `sum(p.numel())`.

An unknown `model_type` is planned as a Llama-style decoder (the layout most new decoders share), with a
warning that its parameter count is an estimate.
"""

import re
from dataclasses import dataclass
from typing import Any

from compiler.spec.errors import ConfigError
from compiler.spec.files import FileError, as_json, integer, number


@dataclass(frozen=True)
class Architecture:
    gated: bool = True
    """SwiGLU-style MLP (gate, up and down projections), else up and down only."""
    layernorm: bool = False
    """LayerNorm with a bias, else RMSNorm (a weight only)."""
    learned_positions: bool = False
    """A position embedding table (GPT-2), else rotary embeddings."""
    qkv_bias: bool = False
    """q, k and v carry biases whatever config.json's attention_bias says (Qwen2)."""
    o_bias: bool = False
    """The attention output and the MLP projections carry biases (GPT-2)."""
    qk_norm: bool = False
    """An RMSNorm over each head's queries and keys (Qwen3)."""
    qk_norm_whole: bool = False
    """An RMSNorm over all the heads' queries and over all the keys at once (OLMoE)."""
    sinks: bool = False
    """A learned attention sink logit per head (gpt-oss)."""
    experts: bool = False
    """A mixture of experts: config.json gives its routed experts per MoE block under one of `EXPERT_KEYS`."""
    moe_layout: str = ""
    """Where config.json says more of the mixture: 'qwen' (dense blocks by decoder_sparse_step and
    mlp_only_layers; Qwen2-MoE's gated shared expert by shared_expert_intermediate_size), 'deepseek' (the first
    first_k_dense_replace blocks dense, n_shared_experts, multi-head latent attention), '' (every block MoE)."""
    expert_ffn_key: str = "moe_intermediate_size"
    """config.json's key for one routed expert's MLP width."""
    tied_default: bool = False
    """tie_word_embeddings when config.json leaves it out (the config class's default)."""
    tensor_parallel: bool = True
    """transformers gives it a tensor-parallel plan of column- and row-wise linear layers only (the plans
    dockyard applies with DTensor under FSDP)."""
    linear_names: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    # (a mixture of experts' routed experts are fused 3-d parameters, not linear layers: no adapter names them)
    """The names of a decoder layer's projections in transformers' modeling file: what `model.lora.targets`
    may name."""


ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
GATED_MLP = ("gate_proj", "up_proj", "down_proj")

EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
"""Where config.json counts the routed experts: the Hub's files use the architecture's own name, transformers 5
writes Qwen's and gpt-oss's as num_local_experts (its attribute map)."""

ARCHITECTURES = {
    "llama": Architecture(),
    "mistral": Architecture(),
    "qwen2": Architecture(qkv_bias=True),
    "qwen3": Architecture(qk_norm=True, tensor_parallel=False),  # its per-head norms need a tensor-parallel all-reduce
    "gemma": Architecture(tied_default=True),
    # Mixtures of experts: transformers' tensor-parallel plans for them shard the experts (not column/row only)
    "mixtral": Architecture(
        tensor_parallel=False,
        experts=True,
        expert_ffn_key="intermediate_size",
        linear_names=ATTENTION,
    ),
    "qwen2_moe": Architecture(qkv_bias=True, tensor_parallel=False, experts=True, moe_layout="qwen"),
    "qwen3_moe": Architecture(
        qk_norm=True, tensor_parallel=False, experts=True, moe_layout="qwen", linear_names=ATTENTION
    ),
    "olmoe": Architecture(
        qk_norm_whole=True,
        tensor_parallel=False,
        experts=True,
        expert_ffn_key="intermediate_size",
        linear_names=ATTENTION,
    ),
    "gpt_oss": Architecture(
        sinks=True,
        tensor_parallel=False,
        experts=True,
        expert_ffn_key="intermediate_size",
        linear_names=ATTENTION,
    ),
    "deepseek_v3": Architecture(
        tensor_parallel=False,
        experts=True,
        moe_layout="deepseek",
        linear_names=("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", *GATED_MLP),
    ),
    "gpt2": Architecture(
        gated=False,
        layernorm=True,
        learned_positions=True,
        qkv_bias=True,
        o_bias=True,
        tied_default=True,
        tensor_parallel=False,  # fused Conv1D projections: transformers has no tensor-parallel plan for it
        linear_names=("c_attn", "c_proj", "c_fc"),
    ),
}
LLAMA_LIKE = ARCHITECTURES["llama"]

GPT2_KEYS = {"layers": "n_layer", "hidden": "n_embd", "heads": "n_head", "context": "n_positions"}
LLAMA_KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "context": "max_position_embeddings",
}


def architecture(model_type: str) -> Architecture:
    return ARCHITECTURES.get(model_type, LLAMA_LIKE)


def model_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    """`ModelConfig`'s shape fields from a checkpoint's config.json (read from `where`), each checked against
    the architecture: whole numbers where counts belong, key/value heads that divide the heads, a head size
    the hidden size allows, a finite rope base."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError("model.path", f"{where} has no model_type", "point model.path at a transformers checkpoint")
    if not GRAMMAR.fullmatch(model_type):
        raise FileError("model.path", where, f"gives model_type = {as_json(model_type)}, not a transformers model type")
    arch = architecture(model_type)
    keys = GPT2_KEYS if model_type == "gpt2" else LLAMA_KEYS
    shape = {name: _integer(config, key, where) for name, key in keys.items()}
    hidden, heads = shape["hidden"], shape["heads"]

    def optional(key: str, default: int | None) -> int | None:
        return default if config.get(key) is None else _integer(config, key, where)

    ffn = optional("n_inner", 4 * hidden) if model_type == "gpt2" else _integer(config, "intermediate_size", where)
    kv_heads = optional("num_key_value_heads", heads) or heads
    head_dim = optional("head_dim", None)
    if heads % kv_heads:
        raise FileError("model.path", where, f"gives {kv_heads} key/value heads, which do not divide {heads} heads")
    if head_dim is None and hidden % heads:
        raise FileError("model.path", where, f"gives {heads} heads, which do not divide hidden_size {hidden}")
    rope = config.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    theta_from = config if config.get("rope_theta") is not None else rope
    attention_bias = _flag(config, "attention_bias", False, where)
    return (
        shape
        | {
            "architecture": model_type,
            "kv_heads": kv_heads,
            "head_dim": head_dim or hidden // heads,
            "ffn_hidden": ffn,
            "vocab": _integer(config, "vocab_size", where),
            "activation": "swiglu" if arch.gated else "gelu",
            "norm": "layernorm" if arch.layernorm else "rmsnorm",
            "position": "learned" if arch.learned_positions else "rope",
            "rope_theta": number(theta_from, "rope_theta", "model.path", where, default=10000.0),
            "tied_embeddings": _flag(config, "tie_word_embeddings", arch.tied_default, where),
            "bias": arch.o_bias or attention_bias,
            "quantization": _quantization(config, where),
        }
        | _experts(arch, config, shape["layers"], where)
    )


def _quantization(config: dict[str, Any], where: str) -> str:
    """config.json's quantization method (gpt-oss: mxfp4, DeepSeek-V3: fp8), empty for none."""
    quantization = config.get("quantization_config")
    if quantization is None:
        return ""
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    if not isinstance(method, str) or not GRAMMAR.fullmatch(method):
        raise FileError(
            "model.path", where, f"gives quantization_config = {as_json(quantization)}, without a quant_method"
        )
    return method


def _experts(arch: Architecture, config: dict[str, Any], layers: int, where: str) -> dict[str, Any]:
    """The mixture of experts (`model.moe`) and DeepSeek's latent attention (`model.mla`) from config.json."""
    if not arch.experts:
        return {}
    key = next((key for key in EXPERT_KEYS if config.get(key) is not None), EXPERT_KEYS[0])
    moe = {
        "experts": _integer(config, key, where),
        "experts_per_token": _integer(config, "num_experts_per_tok", where),
        "ffn_hidden": _integer(config, arch.expert_ffn_key, where),
        "biased": arch.sinks,  # gpt-oss: biased experts and router
    }
    if moe["experts_per_token"] > moe["experts"]:
        raise FileError(
            "model.path", where, f"routes each token to {moe['experts_per_token']} of {moe['experts']} experts"
        )
    if arch.moe_layout == "qwen" and config.get("shared_expert_intermediate_size"):  # Qwen2-MoE: gated
        moe |= {"shared_ffn_hidden": _integer(config, "shared_expert_intermediate_size", where), "shared_gate": True}
    if arch.moe_layout == "deepseek" and config.get("n_shared_experts"):
        moe["shared_ffn_hidden"] = _integer(config, "n_shared_experts", where) * moe["ffn_hidden"]
    moe["dense_layers"] = _dense_layers(arch.moe_layout, config, layers, where)
    fields: dict[str, Any] = {"moe": moe}
    if arch.moe_layout == "deepseek":
        names = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        fields["mla"] = {name: _integer(config, name, where) for name in names}
        fields["mla"]["q_lora_rank"] = (
            0 if config.get("q_lora_rank") is None else _integer(config, "q_lora_rank", where)
        )
    return fields


def _dense_layers(layout: str, config: dict[str, Any], layers: int, where: str) -> int:
    """Blocks with a dense MLP: DeepSeek's first `first_k_dense_replace`; Qwen's `mlp_only_layers` and those
    `decoder_sparse_step` skips (block i has experts where (i + 1) % step == 0)."""
    if layout == "deepseek":
        return min(layers, integer(config, "first_k_dense_replace", "model.path", where, minimum=0))
    if layout != "qwen":
        return 0
    step = 1 if config.get("decoder_sparse_step") is None else _integer(config, "decoder_sparse_step", where)
    only = config.get("mlp_only_layers") or []
    if step < 1 or not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise FileError(
            "model.path", where, "gives decoder_sparse_step < 1 or mlp_only_layers that are not layer numbers"
        )
    return sum(1 for i in range(layers) if i in only or (i + 1) % step)


GRAMMAR = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A transformers model type (`llama`, `gpt_neox`, `xlm-roberta`; remote code may use capitals)."""


def _integer(config: dict[str, Any], key: str, where: str) -> int:
    return integer(config, key, "model.path", where)


def _flag(config: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise FileError("model.path", where, f"gives {key} = {as_json(value)}, not true or false")
    return value
