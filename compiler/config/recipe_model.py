"""The recipe keys of what is trained beyond the optimizer: LoRA adapters (axolotl's `adapter`, TRL's
`use_peft`) and their quantized base (`load_in_4bit`, `load_in_8bit`), the parameters a full fine-tune trains
(axolotl's `unfrozen_parameters`), the DPO objective (TRL's `beta` and `loss_type`, axolotl's `rl`) and the
tokenizer's settings (`chat_template`, `special_tokens`)."""

from typing import Any

from compiler.config.recipe_keys import AXOLOTL_KEYS, Conversion, Text
from compiler.spec.schema.model import ALL_LINEAR

DPO_LOSSES = ("sigmoid", "ipo", "hinge", "robust")
"""TRL's `loss_type` values that dockyard's DPO computes as TRL does (`trainer.dpo.loss`)."""
TRL_LORA = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
"""TRL's `ModelConfig` defaults of `use_peft`'s adapters."""
AXOLOTL_LORA = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
"""axolotl's adapters where the recipe leaves rank or alpha out (peft's defaults; its lora_dropout is 0)."""


def adapter(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `adapter: lora` with its `lora_r`, `lora_alpha`, `lora_dropout`, and `lora_target_modules` or
    `lora_target_linear`."""
    if value not in ("lora", "qlora"):
        return out.refuse(key, f"{value} is not an adapter dockyard trains (lora, qlora)")
    _lora(out, recipe, AXOLOTL_LORA)
    if value == "qlora" and not recipe.get("load_in_4bit"):
        load_in_4bit(out, key, True, recipe)  # qlora's base is 4-bit whether or not the recipe says so


def load_in_4bit(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """TRL's and axolotl's bitsandbytes 4-bit base under the adapters (QLoRA): `bnb_4bit_quant_type` nf4, and
    double quantization as each tool sets it (TRL's `use_bnb_nested_quant`, off unless given; axolotl's on
    unless its `bnb_config_kwargs` say otherwise). `bnb_4bit_compute_dtype` and `bnb_4bit_quant_storage` change
    no value trained: the dequantized matmuls run in parallelism.mixed_precision, as every other matmul."""
    if not value or not _adapted(out, key, recipe):
        return
    options = recipe | dict(recipe.get("bnb_config_kwargs") or {})
    kind = options.get("bnb_4bit_quant_type") or "nf4"
    if kind != "nf4":
        return out.refuse("bnb_4bit_quant_type", f"{kind}: dockyard quantizes a 4-bit base as nf4")
    nested = options.get("bnb_4bit_use_double_quant", options.get("use_bnb_nested_quant"))
    if nested is None:
        nested = bool(AXOLOTL_KEYS & recipe.keys())  # axolotl double-quantizes unless told not to, TRL when asked
    out.set("model.lora.quantize_base", "nf4")
    out.set("model.lora.double_quant", bool(nested))


def load_in_8bit(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """bitsandbytes' 8-bit base under the adapters: int8 weights with a scale per row."""
    if not value or not _adapted(out, key, recipe):
        return
    if recipe.get("load_in_4bit") or recipe.get("adapter") == "qlora":
        return out.refuse(key, "a 4-bit base (load_in_4bit, adapter: qlora) is asked for too: give one of them")
    out.set("model.lora.quantize_base", "int8")


def _adapted(out: Conversion, key: str, recipe: dict) -> bool:
    """A quantized base trains only under adapters (TRL's `use_peft`, axolotl's `adapter`)."""
    if recipe.get("use_peft") or recipe.get("adapter"):
        return True
    out.refuse(key, "a quantized base trains only under adapters: set use_peft (TRL) or adapter (axolotl)")
    return False


def use_peft(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """TRL's `use_peft` with its ModelConfig's `lora_r`, `lora_alpha`, `lora_dropout`, `lora_target_modules`."""
    if value is not True:
        raise ValueError(value)
    _lora(out, recipe, TRL_LORA)
    if not recipe.get("lora_target_modules"):
        out.notes.append(
            "lora_target_modules: unset, peft's default for the architecture; dockyard adapts q_proj and v_proj, "
            "peft's default for Llama-style models"
        )
        out.set("model.lora.targets", ["q_proj", "v_proj"])


def _lora(out: Conversion, recipe: dict, defaults: dict[str, float]) -> None:
    out.set("model.lora.rank", int(recipe.get("lora_r") or defaults["lora_r"]))
    out.set("model.lora.alpha", float(_given(recipe, "lora_alpha", defaults)))
    out.set("model.lora.dropout", float(_given(recipe, "lora_dropout", defaults)))
    targets = recipe.get("lora_target_modules")
    if recipe.get("lora_target_linear") or targets == ALL_LINEAR:
        out.set("model.lora.targets", [ALL_LINEAR])
    elif targets:
        out.set("model.lora.targets", [targets] if isinstance(targets, str) else [str(t) for t in targets])


def _given(recipe: dict, key: str, defaults: dict[str, float]) -> float:
    return defaults[key] if recipe.get(key) is None else recipe[key]


def unfrozen_parameters(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `unfrozen_parameters`: a full fine-tune trains only the parameters these patterns match
    (`model.trainable_parameters`, read as axolotl reads them). axolotl applies them after the adapters are added,
    and does not support them with an adapter (axolotl-ai-cloud/axolotl#1188): there the adapters train, every
    weight of the model frozen, and the patterns are left out with a note."""
    patterns = [value] if isinstance(value, str) else [str(pattern) for pattern in value]
    if recipe.get("adapter"):
        out.notes.append(
            f"{key}: left out under adapter: {recipe['adapter']}: the adapters (model.lora) train and every weight of "
            "the model stays frozen (axolotl does not support unfreezing parameters with an adapter)"
        )
        return
    out.set("model.trainable_parameters", [Text(pattern) for pattern in patterns])


def rl(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `rl`: dpo, or ipo (DPO with IPO's loss); its defaults are `source_tool`'s."""
    if value == "ipo":
        out.set("trainer.dpo.loss", "ipo")
    elif value != "dpo":
        out.refuse(key, f"{value}: dockyard trains sft and dpo (trainer.objective)")


def dpo_loss(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """TRL's `loss_type`: one of the DPO losses dockyard computes as TRL does (a list of one is that loss).
    An SFT recipe's nll and chunked_nll are the same next-token loss dockyard computes."""
    names = [value] if isinstance(value, str) else list(value)
    if out.overrides.get("trainer.objective") != "dpo":
        if names not in (["nll"], ["chunked_nll"]):
            out.refuse(key, f"{value}: dockyard's SFT loss is the next-token loss (nll)")
        return
    if len(names) != 1 or names[0] not in DPO_LOSSES:
        return out.refuse(key, f"{value}: dockyard's DPO losses are {', '.join(DPO_LOSSES)}, one at a time")
    out.set("trainer.dpo.loss", names[0])


def label_smoothing(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """DPOConfig's `label_smoothing`: the flip probability of the robust loss (with sigmoid, cDPO)."""
    if float(value) and recipe.get("loss_type") not in ("robust", ["robust"]):
        return out.refuse(key, "dockyard smooths labels with loss_type robust only (no cDPO)")
    out.set("trainer.dpo.label_smoothing", float(value))


def special_tokens(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `special_tokens`: a pad token changes nothing trained (padding is masked out of the loss); an
    end-of-sequence token replaces the tokenizer's (`data.eos_token`); other tokens would be added to it."""
    for name, token in dict(value).items():
        if name == "eos_token" and token:
            out.set("data.eos_token", Text(token))
        elif name != "pad_token" and token:
            out.refuse(f"{key}.{name}", "dockyard adds no tokens to the tokenizer")


def chat_template(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """An inline Jinja template (TRL's and the handbook's `chat_template`, axolotl's `chat_template_jinja`, which its
    `chat_template: jinja` selects) is `data.chat_template`; a name (axolotl's `llama3`, `qwen_25`) is read as the
    model's own, which its tokenizer carries."""
    if key == "chat_template_jinja" or "{%" in str(value) or "{{" in str(value):
        out.set("data.chat_template", Text(value))
    elif value != "jinja":
        out.notes.append(f"{key}: {value} is read as the model's own template, the one data.tokenizer carries")


def eot_tokens(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `eot_tokens`, the end-of-turn tokens trained after each reply: dockyard trains the first special
    token the template writes after a reply, which is its end-of-turn marker."""
    tokens = [value] if isinstance(value, str) else [str(token) for token in value]
    out.notes.append(
        f"{key}: {', '.join(tokens)}: dockyard trains the first special token the chat template writes after each "
        "reply, its end-of-turn marker (these, where the tokenizer holds them as special tokens)"
    )
