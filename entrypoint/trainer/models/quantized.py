"""QLoRA's frozen base (`model.lora.quantize_base`): once the checkpoint is loaded, every linear layer of the
decoder's blocks (the output head left out, as transformers' bitsandbytes integration leaves it) is replaced
by a `QuantizedLinear` holding its weight as bitsandbytes quantizes it: NF4 in blocks of 64 (with
`double_quant` the blocks' scales quantized again), or int8 with one scale per row. The weight is
dequantized for each matmul, forward and again backward, so that no full-precision copy outlives the
matmul (as bitsandbytes' own 4-bit matmul does); peft's adapters beside it stay in fp32 and train.

The quantized weights are buffers left out of the state dict: they are the checkpoint's, frozen, so a
training checkpoint holds the adapters and the unquantized parts, a resumed run quantizes the checkpoint
again (quantization is deterministic), and the export merges the adapters into the checkpoint's own
weights (`hf_files.with_source_weights`).
"""

import torch
import torch.nn.functional as F
from torch import nn

from compiler.spec.schema import BaseQuantization, ModelConfig

NF4_BLOCK = 64
"""Weights per NF4 scale (bitsandbytes' and the QLoRA paper's block size)."""


class QuantizedLinear(nn.Module):
    """A frozen `nn.Linear` whose weight is held quantized; the bias (if any) stays a frozen parameter."""

    def __init__(self, linear: nn.Linear, kind: BaseQuantization, double_quant: bool) -> None:
        import bitsandbytes.functional as bnb

        super().__init__()
        self.in_features, self.out_features, self.kind = linear.in_features, linear.out_features, kind
        weight = linear.weight.detach()
        if kind is BaseQuantization.nf4:
            packed, self.quant_state = bnb.quantize_4bit(
                weight, blocksize=NF4_BLOCK, compress_statistics=double_quant, quant_type="nf4"
            )
            self.register_buffer("packed", packed, persistent=False)
        else:
            packed, scales, _ = bnb.int8_vectorwise_quant(weight)
            self.register_buffer("packed", packed, persistent=False)
            self.register_buffer("scales", scales, persistent=False)
        self.bias = linear.bias
        if self.bias is not None:
            self.bias.requires_grad_(False)

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        import bitsandbytes.functional as bnb

        if self.kind is BaseQuantization.nf4:
            weight = bnb.dequantize_4bit(self.packed, self.quant_state, quant_type="nf4")
        else:
            weight = bnb.int8_vectorwise_dequant(self.packed, self.scales)
        return weight.to(dtype)

    def held_bytes(self) -> int:
        """The quantized weight's bytes, its scales (and their own scales) included."""
        if self.kind is BaseQuantization.nf4:
            state = self.quant_state
            held = [self.packed, state.absmax, *([state.state2.absmax] if state.nested else [])]
        else:
            held = [self.packed, self.scales]
        return sum(tensor.numel() * tensor.element_size() for tensor in held)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _DequantizedMatmul.apply(x, self)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.kind.value}"


class _DequantizedMatmul(torch.autograd.Function):
    """x · Wᵀ with W dequantized in the forward and again in the backward: only the quantized weight is kept
    between them, and the frozen weight gets no gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layer: QuantizedLinear) -> torch.Tensor:
        ctx.layer = layer
        return F.linear(x, layer.dequantized(x.dtype))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad @ ctx.layer.dequantized(grad.dtype), None


def quantize_base(base: nn.Module, config: ModelConfig) -> int:
    """Replace the frozen linear layers of `base` (the model under peft's wrapper) by quantized ones, in place;
    returns how many. peft's adapters (`lora_A`, `lora_B`) and the output head stay as they are."""
    head = base.get_output_embeddings()
    chosen = [
        name
        for name, part in base.named_modules()
        if type(part) is nn.Linear and part is not head and ".lora_" not in name and not part.weight.requires_grad
    ]
    if not chosen:
        raise NotImplementedError(f"{config.architecture} has no nn.Linear layers to quantize")
    lora = config.lora
    for name in chosen:
        owner, _, attribute = name.rpartition(".")
        parent = base.get_submodule(owner)
        setattr(parent, attribute, QuantizedLinear(getattr(parent, attribute), lora.quantize_base, lora.double_quant))
    return len(chosen)


def quantized_lines(model: nn.Module) -> list[str]:
    """What the run's first lines say of a quantized base: how many layers, and their bytes against fp32's."""
    layers = [part for part in model.modules() if isinstance(part, QuantizedLinear)]
    if not layers:
        return []
    held = sum(part.held_bytes() for part in layers)
    full = sum(4 * part.in_features * part.out_features for part in layers)
    kind = layers[0].kind.value
    sizes = f"{held / 2**20:.3g} MiB instead of fp32's {full / 2**20:.3g} MiB"
    return [f"{'quantized base':<18}{len(layers)} linear layers held {kind}: {sizes}"]
