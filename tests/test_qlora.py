"""QLoRA (`model.lora.quantize_base`): a quantized linear layer computes with its dequantized weight, which is
within the format's rounding of the original; the plan counts the quantized base at its bytes and refuses
what the trainer does not run it with; convert ports bitsandbytes' recipe keys; and a tiny Llama trains nf4
adapters on two DDP ranks, its adapter loading with peft on the unquantized checkpoint."""

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from compiler.config.recipes import convert
from compiler.images.render import feature_layers
from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError, UnsupportedError
from compiler.spec.schema import BaseQuantization
from entrypoint.trainer.models.quantized import QuantizedLinear
from tests.entrypoint_support import tiny_plan, train
from tests.helpers import plan_for
from tests.pretrained import save_checkpoint

NF4_LEVELS = torch.tensor(
    [-1.0, -0.6961928, -0.52507305, -0.3949175, -0.28444138, -0.18477343, -0.09105004, 0.0,
     0.0795803, 0.1609302, 0.2461123, 0.33791524, 0.44070983, 0.562617, 0.72295684, 1.0]
)  # fmt: skip
"""The 16 NormalFloat values (QLoRA paper, appendix E): a weight is stored as the nearest, times its block's
absolute maximum."""
NF4_BYTES = {True: 0.5 + 1 / 64 + 4 / (64 * 256), False: 0.5 + 4 / 64}
"""Bytes per nf4 weight with and without double quantization: two weights a byte, an fp32 scale per 64 (or
an 8-bit one, with an fp32 scale per 256 scales)."""


def _linear(seed: int, bias: bool = False) -> nn.Linear:
    torch.manual_seed(seed)
    linear = nn.Linear(128, 96, bias=bias)
    linear.weight.requires_grad_(False)
    return linear


@pytest.mark.parametrize("double_quant", [True, False])
def test_an_nf4_linear_computes_with_its_weight_rounded_to_the_nearest_nf4_level(double_quant):
    linear = _linear(0, bias=True)
    quantized = QuantizedLinear(linear, BaseQuantization.nf4, double_quant)
    dequantized = quantized.dequantized(torch.float32)
    blocks, scales = linear.weight.reshape(-1, 64), linear.weight.reshape(-1, 64).abs().amax(dim=1, keepdim=True)
    nearest = NF4_LEVELS[(blocks / scales).unsqueeze(-1).sub(NF4_LEVELS).abs().argmin(-1)] * scales
    # double quantization rounds each block's scale to 8 bits: within 1/128 of it, relatively
    assert dequantized.reshape(-1, 64) == pytest.approx(nearest, rel=1e-2 if double_quant else 1e-6, abs=1e-6)
    half_gap = NF4_LEVELS.diff().max() / 2  # the farthest a weight lies from its level, times its block's scale
    assert ((dequantized.reshape(-1, 64) - blocks).abs() <= half_gap * scales * 1.01).all()
    x = torch.randn(3, 5, 128, requires_grad=True)
    reference = x.detach().clone().requires_grad_(True)
    out, expected = quantized(x), nn.functional.linear(reference, dequantized, linear.bias)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, reference.grad, rtol=0, atol=1e-4)  # dequantized again in the backward
    assert list(quantized.state_dict()) == ["bias"]  # the frozen weight is the checkpoint's, not the run's
    assert quantized.held_bytes() == pytest.approx(NF4_BYTES[double_quant] * linear.weight.numel(), rel=1e-3)


def test_an_int8_linear_keeps_each_weight_within_half_its_rows_step():
    linear = _linear(1)
    quantized = QuantizedLinear(linear, BaseQuantization.int8, double_quant=False)
    step = linear.weight.abs().amax(dim=1, keepdim=True) / 127
    assert ((quantized.dequantized(torch.float32) - linear.weight).abs() <= step / 2 + 1e-7).all()
    assert quantized.packed.dtype == torch.int8


def test_the_trainers_model_holds_an_int8_base_that_computes_as_the_checkpoint_rounded_to_int8(hf_checkpoints):
    """model=hf as the trainer builds it (on meta, then filled from the checkpoint): every linear layer of the
    blocks is held int8, the logits are those of transformers' model with each weight rounded to its row's
    int8 step (the adapters start at zero), and only the adapters get gradients."""
    from transformers import AutoModelForCausalLM

    from entrypoint.trainer.engines.base import materialise
    from entrypoint.trainer.models import MODELS

    checkpoint = hf_checkpoints["llama"]
    lora = ("model.lora.rank=4", "model.lora.targets=[q_proj,v_proj]", "model.lora.quantize_base=int8")
    config = tiny_plan("model=hf", f"model.path={checkpoint}", *lora).model
    with torch.device("meta"):
        model = MODELS["hf"].build(config)
    materialise(MODELS["hf"], model, torch.device("cpu"))
    held = [name for name, part in model.named_modules() if isinstance(part, QuantizedLinear)]
    assert len(held) == config.layers * 7  # q, k, v, o, gate, up, down: adapted or not
    theirs = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        for name, part in theirs.named_modules():
            if isinstance(part, nn.Linear) and ".layers." in name:
                step = part.weight.abs().amax(dim=1, keepdim=True) / 127
                part.weight.copy_(torch.round(part.weight / step) * step)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=tokens).logits
    torch.testing.assert_close(logits, theirs(input_ids=tokens).logits.detach(), rtol=0, atol=1e-4)
    logits.square().mean().backward()
    trained = {name for name, param in model.named_parameters() if param.grad is not None}
    assert trained and all(".lora_" in name for name in trained)


def _quantized_weights(checkpoint) -> int:
    """The checkpoint's weights of its blocks' linear layers: what an nf4 or int8 base holds quantized."""
    weights = load_file(checkpoint / "model.safetensors")
    return sum(t.numel() for name, t in weights.items() if ".layers." in name and name.endswith("_proj.weight"))


@pytest.mark.parametrize(
    ("kind", "double_quant", "size"),
    [("nf4", True, NF4_BYTES[True]), ("nf4", False, NF4_BYTES[False]), ("int8", False, 1.0)],
)
def test_the_plan_counts_a_quantized_base_at_its_bytes(kind, double_quant, size, hf_checkpoints):
    lora = ("model=hf", f"model.path={hf_checkpoints['llama']}", "hardware=p4d.24xlarge", "model.lora.rank=8")
    full = plan_for(*lora).estimate.memory
    quantized = plan_for(*lora, f"model.lora.quantize_base={kind}", f"model.lora.double_quant={double_quant}")
    held = _quantized_weights(hf_checkpoints["llama"])
    # fp32 weights (4 bytes) and the bf16 copies autocast keeps (2) become `size` bytes
    assert full.parameters - quantized.estimate.memory.parameters == pytest.approx(held * (4 + 2 - size), abs=1)
    assert quantized.estimate.memory.optimizer == full.optimizer
    assert any(line.endswith(f"held {kind} (QLoRA)") for line in summary_lines(quantized))
    assert ["bitsandbytes==0.50.2"] in feature_layers(quantized)  # the image installs it for this plan only
    assert not any(pin.startswith("bitsandbytes") for layer in feature_layers(plan_for(*lora)) for pin in layer)


@pytest.mark.parametrize(
    ("overrides", "error", "key"),
    [
        (("model.lora.rank=0",), ConfigError, "model.lora.quantize_base"),
        (("parallelism=fsdp",), UnsupportedError, "model.lora.quantize_base"),
        (("parallelism=zero2",), UnsupportedError, "model.lora.quantize_base"),
    ],
)
def test_what_a_quantized_base_does_not_run_with_is_refused_naming_the_key(overrides, error, key, hf_checkpoints):
    base = ("model=hf", f"model.path={hf_checkpoints['llama']}", "hardware=p4d.24xlarge", "model.lora.rank=8")
    with pytest.raises(error) as raised:
        plan_for(*base, "model.lora.quantize_base=nf4", *overrides)
    assert raised.value.key == key


@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ({"use_peft": True, "load_in_4bit": True}, {"quantize_base": "nf4", "double_quant": False}),
        (
            {"use_peft": True, "load_in_4bit": True, "use_bnb_nested_quant": True, "bnb_4bit_quant_type": "nf4"},
            {"quantize_base": "nf4", "double_quant": True},
        ),
        (
            {"adapter": "qlora", "load_in_4bit": True, "micro_batch_size": 2},
            {"quantize_base": "nf4", "double_quant": True},
        ),
        (
            {"adapter": "qlora", "bnb_config_kwargs": {"bnb_4bit_use_double_quant": False}},
            {"quantize_base": "nf4", "double_quant": False},
        ),
        ({"adapter": "lora", "load_in_8bit": True, "load_in_4bit": False}, {"quantize_base": "int8"}),
    ],
)
def test_convert_ports_bitsandbytes_keys_as_each_tool_means_them(recipe, expected):
    out = convert(recipe)
    assert out.refused == []
    assert {key.removeprefix("model.lora."): value for key, value in out.overrides.items()
            if key in ("model.lora.quantize_base", "model.lora.double_quant")} == expected  # fmt: skip


@pytest.mark.parametrize(
    ("recipe", "key"),
    [
        ({"load_in_4bit": True}, "load_in_4bit"),
        ({"use_peft": True, "load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}, "bnb_4bit_quant_type"),
        ({"adapter": "lora", "load_in_4bit": True, "load_in_8bit": True}, "load_in_8bit"),
        ({"adapter": "qlora", "load_in_8bit": True}, "load_in_8bit"),
    ],
)
def test_convert_refuses_a_quantized_base_it_cannot_train_by_the_recipes_key(recipe, key):
    refused = convert(recipe).refused
    assert [line.split(":")[0] for line in refused] == [key]


@pytest.mark.torchrun
def test_nf4_adapters_train_on_two_ddp_ranks_and_load_with_peft_on_the_unquantized_checkpoint(tmp_path):
    """A tiny Llama's nf4 QLoRA on two DDP ranks, stopped and resumed halfway: the loss falls, the checkpoints
    hold the adapters but not the quantized weights, and the exported adapter loads with peft on the original
    checkpoint, giving the merged export's logits."""
    from peft import PeftModel
    from torch.distributed.checkpoint import FileSystemReader
    from transformers import AutoModelForCausalLM

    checkpoint = save_checkpoint(tmp_path / "llama", "llama")
    lora = ("model.lora.rank=4", "model.lora.targets=[all-linear]", "model.lora.quantize_base=nf4")
    plan = tiny_plan("model=hf", f"model.path={checkpoint}", *lora, "parallelism.micro_batch=2", "trainer.lr=1e-2")
    assert plan.layout.dp == 2
    train(plan, tmp_path / "run", DOCKYARD_STOP_AT_STEP="3")  # stopped after its checkpoint at step 3, then
    records = train(plan, tmp_path / "run")  # resumed from it: adapters and optimizer, the base quantized again
    losses = {row["step"]: row["loss"] for row in records if "loss" in row}
    assert sorted(losses) == list(range(1, plan.trainer.steps + 1)) and losses[6] < losses[1]
    saved = FileSystemReader(str(max((tmp_path / "run/checkpoints").glob("step-*")))).read_metadata()
    names = list(saved.state_dict_metadata)
    assert any(".lora_A." in name for name in names)  # the adapters, without the quantized base's weights:
    assert not any(name.endswith(("_proj.weight", "_proj.base_layer.weight")) for name in names)
    exported, adapter = tmp_path / "run/model", tmp_path / "run/model/adapter"
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        before = base(input_ids=tokens).logits
        adapted = PeftModel.from_pretrained(base, adapter)(input_ids=tokens).logits
        merged = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)(input_ids=tokens).logits
    assert (adapted - before).abs().max() > 1e-3  # the adapters trained
    assert merged == pytest.approx(adapted, abs=1e-4)  # merged into the checkpoint's own weights
