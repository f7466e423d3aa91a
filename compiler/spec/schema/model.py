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


class BaseQuantization(Enum):
    none = "none"
    nf4 = "nf4"
    int8 = "int8"


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
    quantize_base: BaseQuantization = BaseQuantization.none
    """QLoRA (Dettmers et al. 2023): the frozen linear layers of the decoder's blocks held quantized while the
    adapters train, each dequantized for its matmul: nf4 (4-bit NormalFloat in blocks of 64, bitsandbytes'
    `load_in_4bit`) or int8 (8 bits per weight with a scale per row, bitsandbytes' `load_in_8bit` weights);
    none keeps them in the training precision. The export merges the adapters into the checkpoint's own,
    unquantized weights."""
    double_quant: bool = True
    """nf4 only: the blocks' fp32 scales quantized again to 8 bits (bitsandbytes' double quantization)."""


@dataclass
class MoeConfig:
    """A mixture of experts (hf: read from config.json): blocks whose MLP is `experts` routed experts, of which
    each token reaches `experts_per_token`, beside experts every token passes through."""

    experts: int = 0
    """Routed experts per MoE block; 0 is a dense model."""
    experts_per_token: int = 0
    """Routed experts each token is sent to (top-k)."""
    ffn_hidden: int = 0
    """Width of one routed expert's MLP (per gate)."""
    shared_ffn_hidden: int = 0
    """Width of the experts every token passes through, all together (DeepSeek's n_shared_experts ×
    moe_intermediate_size, Qwen2-MoE's shared_expert_intermediate_size); 0 for none."""
    shared_gate: bool = False
    """The shared experts' output is scaled by a learned sigmoid gate (Qwen2-MoE)."""
    biased: bool = False
    """The experts' projections and the router carry biases (gpt-oss)."""
    dense_layers: int = 0
    """Blocks with a dense MLP of `model.ffn_hidden` instead of experts (DeepSeek's first_k_dense_replace,
    Qwen's mlp_only_layers and decoder_sparse_step)."""


@dataclass
class LatentAttentionConfig:
    """Multi-head latent attention (DeepSeek-V3, hf: read from config.json): keys and values, and optionally
    queries, go through low-rank latents; 0 ranks are plain attention."""

    q_lora_rank: int = 0
    """Rank of the queries' latent; 0 projects queries directly."""
    kv_lora_rank: int = 0
    """Rank of the keys' and values' latent; 0 is not latent attention."""
    qk_nope_head_dim: int = 0
    """Per head, the query/key width without rotary embeddings."""
    qk_rope_head_dim: int = 0
    """Per head, the query/key width with rotary embeddings (the key's part is shared by the heads)."""
    v_head_dim: int = 0
    """Per head, the value width."""


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
    revision: str = "main"
    """hf with a Hub id: the branch, tag or commit read, by the planner (config.json) and by the nodes (weights and
    tokenizer), as `from_pretrained(revision=...)` reads it (a recipe's `model_revision`)."""
    init: Init = Init.pretrained
    """hf only: start from the checkpoint's weights (pretrained) or from its architecture alone (random)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """hf only: train low-rank adapters instead of the whole model (`lora.rank` > 0)."""
    trainable_parameters: list[str] = field(default_factory=list)
    """hf only: a full fine-tune trains only the parameters whose names one of these regular expressions
    matches, the rest frozen (axolotl's `unfrozen_parameters`, read as axolotl reads them:
    `compiler/spec/trainable.py`); empty trains every parameter. Checked against a local checkpoint's tensor
    names, where a pattern that matches none is refused. Not with LoRA, which freezes every weight of the model
    and trains its adapters."""
    trainable_count: int = 0
    """hf: the parameters `trainable_parameters` chooses, counted from a local checkpoint's safetensors headers
    (the memory estimate gives gradients and optimizer states to these only); 0 where not counted."""
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
    quantization: str = ""
    """hf: config.json's quantization method (mxfp4, fp8 …): the trainer loads the weights dequantized to
    bf16, so the plan sizes that layout."""
    moe: MoeConfig = field(default_factory=MoeConfig)
    """hf: the mixture of experts, read from config.json (none for a dense model)."""
    mla: LatentAttentionConfig = field(default_factory=LatentAttentionConfig)
    """hf: multi-head latent attention's dims, read from config.json (DeepSeek-V3)."""
