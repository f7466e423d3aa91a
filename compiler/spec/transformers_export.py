"""Which transformers architecture the built-in decoder's shape is, if any: the trainer exports the final
model as that architecture (`entrypoint/trainer/models/decoder_hf.py`), and the planner warns when there is
none. Here, in the Plan's types, because both sides need the one answer and the host never imports the runtime.
"""

from compiler.spec.schema import Activation, ModelConfig, Norm, Position

GPT2 = "GPT2LMHeadModel"
"""GELU (tanh), LayerNorm with biases, learned positions, biased linear layers, one key/value head per head."""
LLAMA = "LlamaForCausalLM"
"""SwiGLU, RMSNorm, RoPE; biases (attention_bias, mlp_bias) and grouped-query attention either way."""


def transformers_architecture(model: ModelConfig) -> str | None:
    """The transformers class that computes what the built-in decoder of this shape computes; None if none does."""
    shape = (model.activation, model.norm, model.position)
    if shape == (Activation.gelu, Norm.layernorm, Position.learned) and model.bias and model.kv_heads == model.heads:
        return GPT2
    if shape == (Activation.swiglu, Norm.rmsnorm, Position.rope):
        return LLAMA
    return None
