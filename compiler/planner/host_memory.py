"""What one GPU's process holds outside the GPU, and a checkpoint's size: the host memory offload and
asynchronous checkpoints pin, and the bytes a checkpoint takes on disk and to read. Built on the device
memory terms of `compiler.planner.estimate`."""

import dataclasses

from compiler.planner.estimate import (
    activation_bytes_per_token,
    held_parameters,
    parameter_count,
    pipeline_shares,
    sequence_shards,
    state_bytes_per_parameter,
    trainable_fraction,
)
from compiler.planner.models import model_facts
from compiler.planner.quantized_base import quantized_parameters
from compiler.spec import Layout, schema


def checkpoint_bytes(model: schema.ModelConfig) -> int:
    """One checkpoint on disk: fp32 weights of every parameter but a quantized base's (the source checkpoint's,
    read again on resuming), and AdamW's two fp32 moments of the trainable ones (whatever the sharding: the
    ranks' parts add up to this)."""
    count = parameter_count(model)
    stored = count - quantized_parameters(model, model_facts(model).layers)
    return round(stored * 4 + count * 8 * trainable_fraction(model))


def checkpoint_load_bytes(model: schema.ModelConfig) -> int:
    """Host memory one process needs to read a pretrained checkpoint: one tensor at a time, at most the
    embedding's (read in fp32 at worst), since each rank reads only its slices (never the whole model)."""
    if model.family != "hf" or model.init is not schema.Init.pretrained:
        return 0
    return model.vocab * model.hidden * 4


CHECKPOINT_BYTES_PER_PARAMETER = 12
"""What a checkpoint holds per parameter: the fp32 weight and AdamW's two fp32 moments."""


def host_memory(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    layout: Layout,
    micro_batch: int,
    checkpoint_async: bool = False,
) -> dict:
    """Bytes of one GPU's process that offload keeps in (pinned) host memory, by what they are: every
    layer's saved activations under activation offload (all of them are there when the backward starts),
    the model states `parallelism.offload` moves, and with `trainer.checkpoint_async` the copy of this
    rank's checkpoint (fp32 weights and AdamW's two moments) that is written while training goes on."""
    activation = activation_bytes_per_token(model, par, layout.tp, sequence_shards(layout))["layer"]
    kept = state_bytes_per_parameter(par, layout.shard_degree)
    on_gpu = state_bytes_per_parameter(dataclasses.replace(par, offload=schema.Offload.none), layout.shard_degree)
    moved = sum(on_gpu) - sum(kept)
    host = {"activations": 0, "model states": 0, "checkpoint load": checkpoint_load_bytes(model)}
    staged = CHECKPOINT_BYTES_PER_PARAMETER / layout.shard_degree if checkpoint_async else 0
    host["checkpoint staging"] = 0
    for share in pipeline_shares(model, par, layout):
        offloaded = share.layers * activation * micro_batch * model.seq_len if par.activation_offload else 0
        held = held_parameters(model, layout, share)
        host["activations"] = max(host["activations"], round(offloaded * share.in_flight))
        host["model states"] = max(host["model states"], round(moved * held))
        host["checkpoint staging"] = max(host["checkpoint staging"], round(staged * held))
    return host
