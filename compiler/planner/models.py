"""The model families the planner knows, keyed by `model.family` as the trainer's registry
(`entrypoint.trainer.models`) is: what the planner needs to know of a model without building it (torch
and the runtime stay out of host code). A conformance test holds each entry to the module the trainer
builds: the same parameter count, per pipeline share too.

A family answers for a stretch of the model: `layers` of its repeated blocks, with the input side
(`first`: embeddings) and the output side (`last`: final norm, head) or not, as a pipeline rank holds it.
"""

import re
from collections.abc import Iterator
from typing import Protocol

from compiler.core.architectures import ARCHITECTURES, architecture
from compiler.spec import schema
from compiler.spec.errors import ConfigError, UnknownNameError, shown
from compiler.spec.schema.model import ALL_LINEAR
from compiler.spec.transformers_export import transformers_architecture


class ModelFamily(Protocol):
    def check(self, model: schema.ModelConfig) -> Iterator[str]:
        """Raise a `ConfigError` for a shape the family cannot build; yield warnings."""
        ...

    def pipeline_layers(self, model: schema.ModelConfig) -> int:
        """The repeated layers a pipeline splits into stages."""
        ...

    def tp_divides(self, model: schema.ModelConfig) -> tuple[str, ...]:
        """The `model.` fields the tensor-parallel degree must divide."""
        ...

    def parameter_count(self, model: schema.ModelConfig, layers: int, first: bool, last: bool) -> int:
        """Trainable parameters of `layers` layers, with the input and/or output side."""
        ...

    def layer_parameters(self, model: schema.ModelConfig) -> int:
        """Parameters of one repeated layer."""
        ...

    def tp_split_parameters(self, model: schema.ModelConfig) -> int:
        """Parameters of one layer that tensor parallelism splits over its ranks."""
        ...

    def flops_per_token(self, model: schema.ModelConfig, layers: int, last: bool, tp: int) -> float:
        """Model FLOPs per token (forward and backward) of `layers` layers and the output side when `last`,
        split over `tp` ranks."""
        ...

    def matmul_parameters(self, model: schema.ModelConfig, layers: int, last: bool, tp: int) -> float:
        """Parameters a rank multiplies by (autocast keeps a low-precision copy of each)."""
        ...

    def lora_parameters(self, model: schema.ModelConfig) -> int:
        """Parameters of the low-rank adapters `model.lora` adds (none for a family without them)."""
        ...

    def activation_elements(self, model: schema.ModelConfig) -> dict[str, int]:
        """Per token of one layer, the elements its backward keeps, by kind: 'residual' (whole on every
        tensor-parallel rank, in the residual stream's precision), 'whole' (whole, compute precision),
        'split' (split over the tensor-parallel ranks, compute precision), 'split_fp32' (split, fp32),
        'recomputed_fp32' (the part of split_fp32 selective recomputation does not keep) and 'input' (the
        layer's input, residual precision: what full recomputation keeps)."""
        ...


class DecoderFamily:
    """The built-in decoder (`entrypoint/trainer/models/decoder.py`): GPT-2 and Llama shapes.

    FLOPs per token: 6 × the parameters used in matrix products (every layer and the output head, not the
    embedding lookups) + 12 × layers × hidden × seq_len for attention (the PaLM convention, causal masking
    not discounted).
    """

    def check(self, model: schema.ModelConfig) -> Iterator[str]:
        check_lora(model.lora)  # the built-in decoder takes no adapters, but its values are checked too
        if model.path and model.family != "hf":
            raise ConfigError(
                "model.path",
                f"names a checkpoint, and model.family={model.family} is built from its shape, never loaded",
                "use model=hf to start from the checkpoint, or drop model.path",
            )
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "context", "seq_len"):
            if getattr(model, name) < 1:
                raise ConfigError(f"model.{name}", f"must be at least 1 (got {getattr(model, name)})")
        if model.hidden % model.heads:
            raise ConfigError(
                "model.heads",
                f"{model.heads} heads do not divide hidden={model.hidden}",
                "use a head count that divides model.hidden",
            )
        if model.heads % model.kv_heads:
            raise ConfigError(
                "model.kv_heads",
                f"{model.kv_heads} key/value heads do not divide heads={model.heads}",
                "grouped-query attention needs kv_heads to divide heads",
            )
        if model.seq_len > model.context:
            raise ConfigError(
                "model.seq_len",
                f"{model.seq_len} exceeds the model's context of {model.context}",
                f"set model.seq_len to at most {model.context}",
            )
        if model.position is schema.Position.rope:
            if (model.hidden // model.heads) % 2:
                raise ConfigError(
                    "model.heads",
                    f"RoPE needs an even head size, hidden/heads = {model.hidden // model.heads}",
                    "change model.heads or model.hidden",
                )
            if model.rope_theta <= 0:
                raise ConfigError("model.rope_theta", "must be positive")
        if transformers_architecture(model) is None:
            yield (
                f"model: activation={model.activation.value}, norm={model.norm.value}, "
                f"position={model.position.value}, bias={str(model.bias).lower()}, kv_heads={model.kv_heads} of "
                f"{model.heads} heads has no transformers architecture (GPT-2: gelu, layernorm, learned, bias, "
                "kv_heads=heads; Llama: swiglu, rmsnorm, rope): the final model is saved as model.pt, not in "
                "Hugging Face format"
            )

    def pipeline_layers(self, model: schema.ModelConfig) -> int:
        return model.layers

    def tp_divides(self, model: schema.ModelConfig) -> tuple[str, ...]:
        """Attention heads are split whole over the tensor-parallel ranks."""
        return ("heads", "kv_heads")

    def parameter_count(self, model: schema.ModelConfig, layers: int, first: bool, last: bool) -> int:
        embeddings = model.vocab * model.hidden
        positions = model.context * model.hidden if model.position is schema.Position.learned else 0
        head = 0 if model.tied_embeddings and first else model.vocab * model.hidden  # a last stage's own copy
        outer = (embeddings + positions if first else 0) + (self._norm_parameters(model) + head if last else 0)
        return outer + layers * self.layer_parameters(model)

    def layer_parameters(self, model: schema.ModelConfig) -> int:
        kv_width = model.kv_heads * (model.hidden // model.heads)
        attention = 2 * model.hidden * model.hidden + 2 * model.hidden * kv_width
        mlp = (self._mlp_inputs(model) + 1) * model.hidden * model.ffn_hidden
        if model.bias:
            attention += 2 * model.hidden + 2 * kv_width
            mlp += self._mlp_inputs(model) * model.ffn_hidden + model.hidden
        return attention + mlp + 2 * self._norm_parameters(model)

    def tp_split_parameters(self, model: schema.ModelConfig) -> int:
        """All but the layer's two norms."""
        return self.layer_parameters(model) - 2 * self._norm_parameters(model)

    def flops_per_token(self, model: schema.ModelConfig, layers: int, last: bool, tp: int) -> float:
        attention = 12 * layers * model.hidden * model.seq_len / tp
        return 6 * self.matmul_parameters(model, layers, last, tp) + attention

    def matmul_parameters(self, model: schema.ModelConfig, layers: int, last: bool, tp: int) -> float:
        """Its share of its layers, and the whole output head."""
        return layers * self.layer_parameters(model) / tp + (model.vocab * model.hidden if last else 0)

    def activation_elements(self, model: schema.ModelConfig) -> dict[str, int]:
        """After Korthikanti et al. 2022, for SDPA attention (no s² term) without dropout: the two norm
        inputs; the inputs of the QKV and MLP projections; q, k, v (GQA-sized), the attention output and 2
        (GELU) or 4 (SwiGLU) tensors of ffn width; with RoPE the fp32 copies of q and k the rotation keeps;
        SDPA's fp32 log-sum-exp, one per head, which is all that recomputing softmax(QKᵀ)V saves."""
        h, f = model.hidden, model.ffn_hidden
        kv = model.kv_heads * (h // model.heads)
        rotary = h + kv if model.position is schema.Position.rope else 0
        return {
            "residual": 2 * h,
            "whole": 2 * h,
            "split": h + 2 * kv + h + 2 * self._mlp_inputs(model) * f,
            "split_fp32": rotary + model.heads,
            "recomputed_fp32": model.heads,
            "input": h,
        }

    def lora_parameters(self, model: schema.ModelConfig) -> int:
        return 0

    @staticmethod
    def _norm_parameters(model: schema.ModelConfig) -> int:
        return model.hidden * (2 if model.norm is schema.Norm.layernorm and model.bias else 1)

    @staticmethod
    def _mlp_inputs(model: schema.ModelConfig) -> int:
        return 2 if model.activation is schema.Activation.swiglu else 1


class PretrainedFamily(DecoderFamily):
    """A Hugging Face causal LM (`model.family=hf`), its shape read from config.json
    (`compiler.config.pretrained`) and its projections' biases and norms from `compiler.core.architectures`.
    FLOPs and activations are the built-in decoder's formulas on that shape."""

    def check(self, model: schema.ModelConfig) -> Iterator[str]:
        yield from super().check(model)
        if model.architecture not in ARCHITECTURES:
            yield (
                f"model.architecture: {model.architecture} is planned as a Llama-style decoder; its parameter "
                f"count is an estimate (known: {', '.join(ARCHITECTURES)})"
            )
        if model.lora.rank and not model.lora.targets:
            raise ConfigError("model.lora.targets", "is empty", "name the linear layers to adapt, like [q_proj,v_proj]")
        given = model.lora.rank or model.lora.targets != schema.LoraConfig().targets  # the default is Llama's names
        if (
            given and model.architecture in ARCHITECTURES and model.lora.targets != [ALL_LINEAR]
        ):  # another's module names are unknown here: peft finds them
            names = ARCHITECTURES[model.architecture].linear_names
            for target in model.lora.targets:
                if target.rpartition(".")[2] not in names:
                    raise ConfigError(
                        "model.lora.targets",
                        f"{shown(target)} names no projection of {model.architecture}",
                        f"choose among {', '.join(names)}",
                    )
        widths = [min(shape) for shape in self._adapted_shapes(model)] or [model.hidden]
        if model.lora.rank > min(widths):
            raise ConfigError(
                "model.lora.rank",
                f"{model.lora.rank} exceeds {min(widths)}, the narrowest side of a projection it adapts",
                f"give a rank of at most {min(widths)} (8 to 64 is usual)",
            )

    def parameter_count(self, model: schema.ModelConfig, layers: int, first: bool, last: bool) -> int:
        arch = architecture(model.architecture)
        embeddings = model.vocab * model.hidden + (model.context * model.hidden if arch.learned_positions else 0)
        head = 0 if model.tied_embeddings else model.vocab * model.hidden
        outer = (embeddings if first else 0) + (self._norm_parameters(model) + head if last else 0)
        return outer + layers * self.layer_parameters(model)

    def layer_parameters(self, model: schema.ModelConfig) -> int:
        arch = architecture(model.architecture)
        head_dim = model.head_dim or model.hidden // model.heads
        q, kv, h, f = model.heads * head_dim, model.kv_heads * head_dim, model.hidden, model.ffn_hidden
        attention = 2 * h * q + 2 * h * kv
        attention += (q + 2 * kv if arch.qkv_bias or model.bias else 0) + (h if arch.o_bias or model.bias else 0)
        attention += 2 * head_dim if arch.qk_norm else 0
        mlp_inputs = 2 if arch.gated else 1
        mlp = (mlp_inputs + 1) * h * f + (mlp_inputs * f + h if arch.o_bias else 0)
        return attention + mlp + 2 * self._norm_parameters(model)

    def lora_parameters(self, model: schema.ModelConfig) -> int:
        """The adapters' parameters: rank × (inputs + outputs) of every adapted projection of every layer."""
        return model.layers * model.lora.rank * sum(inputs + outputs for inputs, outputs in self._adapted_shapes(model))

    @staticmethod
    def _adapted_shapes(model: schema.ModelConfig) -> list[tuple[int, int]]:
        """(inputs, outputs) of each projection of a layer that `model.lora.targets` names."""
        head_dim = model.head_dim or model.hidden // model.heads
        q, kv, h, f = model.heads * head_dim, model.kv_heads * head_dim, model.hidden, model.ffn_hidden
        shapes = {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "qkv_proj": (h, q + 2 * kv),
            "o_proj": (q, h),
            "gate_proj": (h, f),
            "up_proj": (h, f),
            "gate_up_proj": (h, 2 * f),
            "down_proj": (f, h),
        }
        every = model.lora.targets == [ALL_LINEAR]
        targets = architecture(model.architecture).linear_names if every else model.lora.targets
        names = {target.rpartition(".")[2] for target in targets}  # peft matches a dotted name by its tail
        return [shape for name, shape in shapes.items() if name in names]

    @staticmethod
    def _norm_parameters(model: schema.ModelConfig) -> int:
        return model.hidden * (2 if architecture(model.architecture).layernorm else 1)


FAMILIES: dict[str, ModelFamily] = {"decoder": DecoderFamily(), "hf": PretrainedFamily()}
"""`model.family` → its facts; the trainer's `entrypoint.trainer.models.MODELS` has the same keys."""


def family(model: schema.ModelConfig) -> ModelFamily:
    if model.family not in FAMILIES:
        raise UnknownNameError("model.family", "model family", model.family, FAMILIES)
    return FAMILIES[model.family]


MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")
"""A module's name or dotted path (`q_proj`, `self_attn.q_proj`): peft matches each as a name, never a regex."""
MAX_LORA_TARGETS = 64
MAX_LORA_RANK = 2**16
"""Above the width of any model's projection."""


def check_lora(lora: schema.LoraConfig) -> None:
    """`model.lora`'s values, checked where LoRA is off too (rank 0), as every value is."""
    if lora.rank < 0 or lora.alpha <= 0 or not 0 <= lora.dropout < 1:  # compose refuses nan and inf
        raise ConfigError("model.lora", "needs rank >= 0, alpha > 0 and 0 <= dropout < 1", "fix the values")
    if lora.rank > MAX_LORA_RANK:
        raise ConfigError("model.lora.rank", f"{lora.rank:,} is above {MAX_LORA_RANK:,}", "8 to 64 is usual")
    if len(lora.targets) > MAX_LORA_TARGETS or len(set(lora.targets)) < len(lora.targets):
        raise ConfigError(
            "model.lora.targets", f"lists {len(lora.targets)} names, or one twice", "name each projection once"
        )
    if ALL_LINEAR in lora.targets and len(lora.targets) > 1:
        raise ConfigError("model.lora.targets", f"lists {ALL_LINEAR} with other names", f"give [{ALL_LINEAR}] alone")
    for target in lora.targets:
        if target == ALL_LINEAR:
            continue
        if not isinstance(target, str) or not MODULE_NAME.fullmatch(target):
            raise ConfigError(
                "model.lora.targets",
                f"{shown(target)} is not a module's name (a regular expression is not taken)",
                "name the projections, like [q_proj,v_proj]",
            )
