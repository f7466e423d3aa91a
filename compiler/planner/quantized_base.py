"""QLoRA (`model.lora.quantize_base`): the frozen linear layers of the decoder's blocks held quantized under the
adapters. Its rules (what the trainer runs it with) and the bytes its base weights take, which the memory
estimate (`estimate`) counts instead of the training precision's.

Bytes per quantized weight, as bitsandbytes stores them: nf4 packs two weights a byte and keeps an fp32
scale per block of 64 (0.5 + 4/64); double quantization stores those scales as 8-bit values with an fp32
scale per 256 of them (0.5 + 1/64 + 4/(64·256)); int8 is one byte a weight and an fp32 scale per row,
which is nothing beside a row's thousands of weights.
"""

from compiler.core.capabilities import TargetCapabilities
from compiler.planner.models import model_facts
from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError, UnsupportedError
from compiler.spec.strategies import TORCH_ENGINE, facts

NF4_BLOCK = 64
"""Weights per fp32 scale (bitsandbytes' 4-bit block size, the QLoRA paper's)."""
SCALE_BLOCK = 256
"""Scales per fp32 scale under double quantization."""
KEY = "model.lora.quantize_base"


def weight_bytes(lora: schema.LoraConfig) -> float:
    """Bytes one quantized weight takes, its share of the scales included."""
    if lora.quantize_base is schema.BaseQuantization.int8:
        return 1.0
    if lora.double_quant:
        return 0.5 + 1 / NF4_BLOCK + 4 / (NF4_BLOCK * SCALE_BLOCK)
    return 0.5 + 4 / NF4_BLOCK


def quantized_parameters(model: schema.ModelConfig, layers: int) -> float:
    """Parameters of `layers` blocks held quantized: their linear layers (all but the norms); none without
    `quantize_base`."""
    if not model.lora.rank or model.lora.quantize_base is schema.BaseQuantization.none:
        return 0.0
    return layers * model_facts(model).layer_tp_split


def check_quantized_base(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    """Errors only (no warnings). A quantized base sits under LoRA adapters, in a dense model trained by DDP: the
    trainer quantizes each rank's whole copy after loading it (FSDP2 would need the quantized weights sharded,
    which torchao's NF4Tensor does and bitsandbytes' do not; ZeRO partitions flat fp32 buffers)."""
    model, strategy = config.model, config.parallelism.strategy
    kind = model.lora.quantize_base
    if kind is schema.BaseQuantization.none:
        return []
    if not model.lora.rank:
        raise ConfigError(
            KEY,
            f"{kind.value} quantizes the frozen base under LoRA adapters",
            "set model.lora.rank (QLoRA), or model.lora.quantize_base=none",
        )
    if facts(strategy).engine != TORCH_ENGINE or not facts(strategy).replicated:
        raise UnsupportedError(
            KEY,
            f"a {kind.value} base trains under parallelism=ddp, not {strategy.value}",
            "set parallelism=ddp (one process or several), or model.lora.quantize_base=none",
        )
    if model.moe.experts:
        raise UnsupportedError(
            KEY, "quantizes linear layers, not a mixture's fused experts", "set model.lora.quantize_base=none"
        )
    return []
