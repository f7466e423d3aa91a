"""Estimates derived from the plan's model and layout (pure functions)."""

from compiler import schema


def parameter_count(model: schema.ModelConfig) -> int:
    """Trainable parameters of the decoder the built-in trainer builds from `model`."""
    head_dim = model.hidden // model.heads
    kv_width = model.kv_heads * head_dim
    attention = 2 * model.hidden * model.hidden + 2 * model.hidden * kv_width
    mlp_inputs = 2 if model.activation is schema.Activation.swiglu else 1
    mlp = (mlp_inputs + 1) * model.hidden * model.ffn_hidden
    norm = model.hidden * (2 if model.norm is schema.Norm.layernorm and model.bias else 1)
    if model.bias:
        attention += 2 * model.hidden + 2 * kv_width
        mlp += mlp_inputs * model.ffn_hidden + model.hidden
    layer = attention + mlp + 2 * norm
    embeddings = model.vocab * model.hidden
    positions = model.context * model.hidden if model.position is schema.Position.learned else 0
    head = 0 if model.tied_embeddings else model.vocab * model.hidden
    return embeddings + positions + model.layers * layer + norm + head
