"""The rules of `trainer.sample_prompts`: prompts the built-in trainer's model completes at each evaluation, on its
Hugging Face export, with the tokenizer it trained with; a number takes the held-out records' prompts."""

from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, schema
from compiler.spec.errors import ConfigError, shown
from compiler.spec.records import Layout
from compiler.spec.transformers_export import transformers_architecture

KEY = "trainer.sample_prompts"


def check_samples(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    """Errors only (no warnings)."""
    trainer, data, model = config.trainer, config.data, config.model
    wanted = trainer.sample_prompts
    listed = isinstance(wanted, list) and all(isinstance(prompt, str) and prompt for prompt in wanted)
    counted = isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0
    if not (listed or counted):
        raise ConfigError(
            KEY,
            f"is {shown(wanted)}",
            "give a list of prompts (trainer.sample_prompts=['Say hello']) or a number of held-out records' prompts",
        )
    if trainer.sample_max_new_tokens < 1:
        raise ConfigError("trainer.sample_max_new_tokens", f"is {trainer.sample_max_new_tokens}", "give 1 or more")
    if not wanted:
        return []
    if trainer.entry is not schema.Entry.builtin:
        raise ConfigError(KEY, "the built-in trainer generates them", "leave it out of a script's run")
    if data.format is schema.DataFormat.tokens or data.source is schema.DataSource.synthetic:
        raise ConfigError(KEY, "needs the tokenizer of text data", "train on data.format=text, chat or preference")
    if model.family == "decoder" and transformers_architecture(model) is None:
        raise ConfigError(
            KEY, "generates with transformers, which has no architecture for this model", "use a GPT-2 or Llama shape"
        )
    if counted and (not data.format.rendered or not isinstance(data.validation, str)):  # records with a prompt
        raise ConfigError(
            KEY,
            "a number takes the prompts of the held-out records of chat or preference data",
            "set data.validation to a held-out file (or split), or give the prompts as a list",
        )
    return []
