"""The model families the planner knows, keyed by `model.family` as the trainer's registry
(`entrypoint.trainer.models`) is: what the planner needs to know of a model without building it (torch
and the runtime stay out of host code). A conformance test holds each entry to the module the trainer
builds: the same parameter count, per pipeline share too.

A family answers for a stretch of the model: `layers` of its repeated blocks, with the input side
(`first`: embeddings) and the output side (`last`: final norm, head) or not, as a pipeline rank holds it.
"""

import dataclasses
import re
from collections.abc import Iterator
from typing import Protocol

from compiler.core.architectures import ARCHITECTURES, architecture
from compiler.planner.model_facts import ModelFacts, Parts
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

    def facts(self, model: schema.ModelConfig) -> ModelFacts:
        """Everything the estimators read of the model: parameters by part, FLOPs, activations."""
        ...


class DecoderFamily:
    """The built-in decoder (`entrypoint/trainer/models/decoder.py`): GPT-2 and Llama shapes.

    FLOPs per token: 6 × the parameters used in matrix products (every layer and the output head, not the
    embedding lookups) + 12 × layers × hidden × seq_len for attention (the PaLM convention, causal masking
    not discounted).
    """

    builds_experts = False

    def check(self, model: schema.ModelConfig) -> Iterator[str]:
        check_lora(model.lora)  # the built-in decoder takes no adapters, but its values are checked too
        if model.path and model.family != "hf":
            raise ConfigError(
                "model.path",
                f"names a checkpoint, and model.family={model.family} is built from its shape, never loaded",
                "use model=hf to start from the checkpoint, or drop model.path",
            )
        if model.moe.experts and not self.builds_experts:
            raise ConfigError(
                "model.moe.experts", "the built-in decoder has no experts", "use model=hf with an MoE checkpoint"
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
            if (model.head_dim or model.hidden // model.heads) % 2:
                raise ConfigError(
                    "model.heads",
                    f"RoPE needs an even head size, hidden/heads = {model.head_dim or model.hidden // model.heads}",
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

    def facts(self, model: schema.ModelConfig) -> ModelFacts:
        h, vocab, moe = model.hidden, model.vocab * model.hidden, model.moe
        embeddings = vocab + (model.context * h if self._learned_positions(model) else 0)
        norm, blocks = self._norm_parameters(model), self._blocks(model)
        head = 0 if model.tied_embeddings else vocab
        return ModelFacts(
            layers=model.layers,
            parameters=dataclasses.replace(blocks, embeddings=embeddings, head=head, norms=blocks.norms + norm),
            blocks=blocks,
            input_side=embeddings,
            output_side=norm + head,
            output_side_alone=norm + self._stage_head(model),
            tp_kept=2 * norm,
            head_matmul=vocab,
            active_fraction=moe.experts_per_token / moe.experts if moe.experts else 1.0,
            attention_flops_per_token=12 * h * model.seq_len,
            activation_elements=self.activation_elements(model),
            lora=self._lora_parameters(model),
            dispatched_per_token=moe.experts_per_token * h if moe.experts else 0,
            moe_layers=model.layers - moe.dense_layers if moe.experts else 0,
        )

    def _blocks(self, model: schema.ModelConfig) -> Parts:
        """The repeated blocks' parameters, all layers together, by part."""
        h, f, layers = model.hidden, model.ffn_hidden, model.layers
        kv_width = model.kv_heads * (h // model.heads)
        attention = 2 * h * h + 2 * h * kv_width
        mlp = (self._mlp_inputs(model) + 1) * h * f
        if model.bias:
            attention += 2 * h + 2 * kv_width
            mlp += self._mlp_inputs(model) * f + h
        return Parts(
            attention=layers * attention, dense_mlp=layers * mlp, norms=layers * 2 * self._norm_parameters(model)
        )

    @staticmethod
    def _token_ffn(model: schema.ModelConfig) -> float:
        """The MLP width one token passes through, averaged over the blocks: with experts, its routed experts'
        and the shared ones' in MoE blocks."""
        moe = model.moe
        if not moe.experts:
            return model.ffn_hidden
        sparse = model.layers - moe.dense_layers
        routed = moe.experts_per_token * moe.ffn_hidden + moe.shared_ffn_hidden
        return (moe.dense_layers * model.ffn_hidden + sparse * routed) / model.layers

    def _learned_positions(self, model: schema.ModelConfig) -> bool:
        return model.position is schema.Position.learned

    def _stage_head(self, model: schema.ModelConfig) -> int:
        """The output head on a last pipeline stage without the embeddings: with tied embeddings, its own copy."""
        return model.vocab * model.hidden

    @staticmethod
    def _lora_parameters(model: schema.ModelConfig) -> int:
        """The built-in decoder takes no adapters."""
        return 0

    def activation_elements(self, model: schema.ModelConfig) -> dict[str, float]:
        """After Korthikanti et al. 2022, for SDPA attention (no s² term) without dropout: the two norm
        inputs; the inputs of the QKV and MLP projections; q, k, v (GQA-sized), the attention output and 2
        (GELU) or 4 (SwiGLU) tensors of ffn width; with RoPE the fp32 copies of q and k the rotation keeps;
        SDPA's fp32 log-sum-exp, one per head, which is all that recomputing softmax(QKᵀ)V saves."""
        h, f = model.hidden, self._token_ffn(model)
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

    @staticmethod
    def _norm_parameters(model: schema.ModelConfig) -> int:
        return model.hidden * (2 if model.norm is schema.Norm.layernorm and model.bias else 1)

    @staticmethod
    def _mlp_inputs(model: schema.ModelConfig) -> int:
        return 2 if model.activation is schema.Activation.swiglu else 1


class PretrainedFamily(DecoderFamily):
    """A Hugging Face causal LM (`model.family=hf`), its shape read from config.json
    (`compiler.config.pretrained`) and its projections' biases and norms from `compiler.core.architectures`.
    FLOPs and activations are the built-in decoder's formulas on that shape, with a token's experts only."""

    builds_experts = True

    def check(self, model: schema.ModelConfig) -> Iterator[str]:
        yield from super().check(model)
        if model.architecture not in ARCHITECTURES:
            yield (
                f"model.architecture: {model.architecture} is planned as a Llama-style decoder; its parameter "
                f"count is an estimate (known: {', '.join(ARCHITECTURES)})"
            )
        if model.quantization:
            yield (
                f"model.quantization: the checkpoint is {model.quantization}-quantized; training loads it "
                "dequantized to bf16, and the plan sizes that layout"
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

    def _learned_positions(self, model: schema.ModelConfig) -> bool:
        return architecture(model.architecture).learned_positions

    def _stage_head(self, model: schema.ModelConfig) -> int:
        """transformers' pipeline stages are not built here (the planner refuses pp > 1 for hf)."""
        return 0 if model.tied_embeddings else model.vocab * model.hidden

    def _blocks(self, model: schema.ModelConfig) -> Parts:
        """The repeated blocks' parameters, all layers together, by part: a mixture of experts' MoE blocks
        hold routed experts (fused [experts, ...] weights), their router and any shared experts where the
        others (`moe.dense_layers`) hold a dense MLP."""
        arch, moe, h = architecture(model.architecture), model.moe, model.hidden
        mlp_inputs = 2 if arch.gated else 1

        def mlp(width: int, biased: bool) -> int:
            return (mlp_inputs + 1) * h * width + (mlp_inputs * width + h if biased else 0)

        sparse = model.layers - moe.dense_layers if moe.experts else 0
        norms = 2 * self._norm_parameters(model) + self._attention_norms(model)
        return Parts(
            attention=model.layers * self._attention(model),
            dense_mlp=(model.layers - sparse) * mlp(model.ffn_hidden, arch.o_bias),
            routed_experts=sparse * moe.experts * mlp(moe.ffn_hidden, moe.biased),
            shared_experts=sparse * (mlp(moe.shared_ffn_hidden, False) + h * moe.shared_gate)
            if moe.shared_ffn_hidden
            else 0,
            router=sparse * moe.experts * (h + moe.biased),
            norms=model.layers * norms,
        )

    @staticmethod
    def _attention(model: schema.ModelConfig) -> int:
        """One block's attention projections (and gpt-oss's sinks); DeepSeek's latent attention goes through
        low-rank latents (`model.mla`)."""
        arch, mla, h, heads = architecture(model.architecture), model.mla, model.hidden, model.heads
        if mla.kv_lora_rank:
            qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            query = h * mla.q_lora_rank + mla.q_lora_rank * heads * qk if mla.q_lora_rank else h * heads * qk
            latent = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * heads * (
                mla.qk_nope_head_dim + mla.v_head_dim
            )
            return query + latent + heads * mla.v_head_dim * h
        head_dim = model.head_dim or h // heads
        q, kv = heads * head_dim, model.kv_heads * head_dim
        attention = 2 * h * q + 2 * h * kv
        attention += (q + 2 * kv if arch.qkv_bias or model.bias else 0) + (h if arch.o_bias or model.bias else 0)
        return attention + (heads if arch.sinks else 0)

    @staticmethod
    def _attention_norms(model: schema.ModelConfig) -> int:
        """Norms inside one block's attention: per-head (Qwen3), whole (OLMoE), or on the latents (DeepSeek)."""
        arch, head_dim = architecture(model.architecture), model.head_dim or model.hidden // model.heads
        if model.mla.kv_lora_rank:
            return model.mla.q_lora_rank + model.mla.kv_lora_rank
        if arch.qk_norm_whole:
            return model.heads * head_dim + model.kv_heads * head_dim
        return 2 * head_dim if arch.qk_norm else 0

    @staticmethod
    def _lora_parameters(model: schema.ModelConfig) -> int:
        """The adapters' parameters: rank × (inputs + outputs) of every adapted projection of every layer."""
        shapes = PretrainedFamily._adapted_shapes(model)
        return model.layers * model.lora.rank * sum(inputs + outputs for inputs, outputs in shapes)

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


_FACTS: dict[str, ModelFacts] = {}
_FACTS_KEPT = 64


def model_facts(model: schema.ModelConfig) -> ModelFacts:
    """The model's facts, computed once per shape by its family (a plan and its fit search ask for them
    many times: the config object is mutable, so they are kept by its printed value)."""
    key = repr(model)
    if key not in _FACTS:
        if len(_FACTS) >= _FACTS_KEPT:
            _FACTS.clear()
        _FACTS[key] = family(model).facts(model)
    return _FACTS[key]


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
