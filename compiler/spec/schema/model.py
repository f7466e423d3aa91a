"""The `model/` group: which model family, and its shape."""

from dataclasses import dataclass
from enum import Enum

from compiler.spec.schema.missing import MISSING


class Activation(Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Norm(Enum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Position(Enum):
    learned = "learned"
    rope = "rope"


@dataclass
class ModelConfig:
    name: str = MISSING
    """The model's name in summaries and image labels (the `model/` option's name)."""
    family: str = "decoder"
    """The model the trainer builds, by its registry name (`entrypoint/trainer/models`); decoder: the built-in
    GPT-2/Llama-style decoder, whose shape the fields below give."""
    layers: int = MISSING
    """Transformer blocks."""
    hidden: int = MISSING
    """Width of the residual stream (d_model)."""
    heads: int = MISSING
    """Attention heads (query heads under grouped-query attention); they divide `hidden`."""
    kv_heads: int = MISSING
    """Key/value heads; fewer than `heads` is grouped-query attention."""
    ffn_hidden: int = MISSING
    """Width of the MLP's inner layer (per gate under SwiGLU)."""
    vocab: int = MISSING
    """Token vocabulary; the embedding and the output head have this many rows."""
    context: int = MISSING
    """The longest sequence the model supports (learned positions or the RoPE length it was trained at)."""
    seq_len: int = MISSING
    """The sequence length trained at; at most `context`."""
    activation: Activation = Activation.gelu
    """The MLP's activation: gelu (GPT-2) or swiglu (Llama)."""
    norm: Norm = Norm.layernorm
    """layernorm (GPT-2) or rmsnorm (Llama)."""
    position: Position = Position.learned
    """learned position embeddings (GPT-2) or rotary embeddings (rope, Llama)."""
    rope_theta: float = 10000.0
    """RoPE's base frequency (position=rope only)."""
    tied_embeddings: bool = True
    """The output projection shares the token embedding's weights."""
    bias: bool = True
    """Linear and norm layers carry biases (GPT-2 style); Llama-style models have none."""
