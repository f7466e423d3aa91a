"""The `model/` group: which model family, and its shape."""

from dataclasses import dataclass, field
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


class Init(Enum):
    pretrained = "pretrained"
    random = "random"


ALL_LINEAR = "all-linear"
"""`model.lora.targets=[all-linear]`: every linear layer of the decoder's blocks (peft's name; the output head
and the embeddings left out). For a local checkpoint the plan lists them, read from its safetensors headers."""


@dataclass
class LoraConfig:
    """Low-rank adapters (LoRA, Hu et al. 2021) on a pretrained model: its weights stay frozen, only the
    adapters train."""

    rank: int = 0
    """The adapters' rank; 0 trains the whole model."""
    alpha: float = 16.0
    """The adapters' output is scaled by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' input."""
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Names (or name suffixes) of the linear layers that get adapters, as `peft` matches them, or
    [all-linear]."""


@dataclass
class ModelConfig:
    name: str = MISSING
    """The model's name in summaries and image labels (the `model/` option's name)."""
    family: str = "decoder"
    """The model the trainer builds, by its registry name (`entrypoint/trainer/models`); decoder: the built-in
    GPT-2/Llama-style decoder, whose shape the fields below give; hf: a Hugging Face causal LM at `path`, whose
    shape the planner reads from its config.json."""
    path: str = ""
    """hf only: the checkpoint, a folder holding config.json (and *.safetensors), an s3:// prefix, or a Hub id."""
    init: Init = Init.pretrained
    """hf only: start from the checkpoint's weights (pretrained) or from its architecture alone (random)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """hf only: train low-rank adapters instead of the whole model (`lora.rank` > 0)."""
    architecture: str = ""
    """hf: the checkpoint's `model_type` (llama, qwen2, gpt2 …), filled from config.json."""
    head_dim: int = 0
    """Width of one attention head; 0 means hidden / heads (hf: config.json's head_dim where it differs)."""
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
