"""`model.trainable_parameters`: regular expressions that choose which of a checkpoint's own weights train in a
full fine-tune (`compiler/spec/trainable.py` reads them as axolotl does; `compiler/config/checkpoint_tensors.py`
checks them against a local checkpoint's tensor names and counts what they choose)."""

from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError
from compiler.spec.trainable import KEY, name_pattern


def check_trainable(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    """Errors only (no warnings). The patterns choose among a checkpoint's weights (model=hf), and not under LoRA,
    which freezes every one of them and trains its adapters (axolotl does not unfreeze parameters with LoRA
    either); each must compile."""
    model = config.model
    if not model.trainable_parameters:
        return []
    if model.family != "hf":
        raise ConfigError(KEY, "chooses among a checkpoint's weights", "use model=hf, or drop the patterns")
    if model.lora.rank:
        raise ConfigError(
            KEY,
            "chooses which of the model's weights train in a full fine-tune, and LoRA freezes them all",
            "drop model.trainable_parameters, or set model.lora.rank=0",
        )
    for pattern in model.trainable_parameters:
        try:
            name_pattern(pattern)
        except ValueError as error:
            raise ConfigError(KEY, str(error), "give regular expressions over parameter names") from None
    return []
