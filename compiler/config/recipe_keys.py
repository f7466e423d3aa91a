"""What `dockyard convert` knows of each recipe tool: which tool wrote a recipe, the defaults it trains with
where the recipe is silent, and the keys that change nothing dockyard trains (`NEUTRAL`) or that it cannot
honour (`REFUSED`). Facts from transformers' `TrainingArguments`, TRL's `SFTConfig`/`DPOConfig`/`ModelConfig`
and axolotl's config schema; and the `Conversion` a port collects."""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TRAINER_DEFAULTS: dict[str, object] = {
    "trainer.lr": 5e-5,
    "trainer.lr_schedule": "linear",
    "trainer.min_lr_ratio": 0.0,
    "trainer.warmup_steps": 0,
    "trainer.weight_decay": 0.0,
    "trainer.adam_beta1": 0.9,
    "trainer.adam_beta2": 0.999,
    "trainer.adam_epsilon": 1e-8,
    "trainer.grad_clip": 1.0,
    "trainer.epochs": 3.0,
    "parallelism.micro_batch": 8,
    "parallelism.grad_accum": 1,
}
"""transformers' `TrainingArguments` defaults of what dockyard's trainer does, as dockyard overrides."""

TRL_SFT_DEFAULTS = TRAINER_DEFAULTS | {
    "trainer.lr": 2e-5,
    "model.seq_len": 1024,
    "data.packing": False,
    "data.loss_on": "all",
}
"""SFTConfig's: lr 2e-5, max_length 1024, no packing, the loss on every token (assistant_only_loss=False)."""

TRL_DPO_DEFAULTS = TRAINER_DEFAULTS | {
    "trainer.lr": 1e-6,
    "model.seq_len": 1024,
    "trainer.objective": "dpo",
    "trainer.dpo.beta": 0.1,
    "data.format": "preference",
}
"""DPOConfig's: lr 1e-6, max_length 1024, β 0.1, the sigmoid loss."""

AXOLOTL_DEFAULTS = TRAINER_DEFAULTS | {
    "trainer.lr_schedule": "cosine",
    "trainer.epochs": 1.0,
    "parallelism.micro_batch": 1,
    "model.seq_len": 512,
    "data.packing": False,
    "data.loss_on": "assistant",
}
"""axolotl's schema: a cosine schedule, 1 epoch, micro batch 1, sequence_len 512, no sample packing, the
loss on the outputs only (train_on_inputs=False); its DPO (`rl: dpo`) is TRL's DPOTrainer."""

AXOLOTL_DPO_DEFAULTS = AXOLOTL_DEFAULTS | {
    "trainer.objective": "dpo",
    "trainer.dpo.beta": 0.1,
    "data.format": "preference",
}
"""axolotl's `rl: dpo` is TRL's DPOTrainer: β 0.1 unless `rl_beta` says otherwise."""

AXOLOTL_KEYS = frozenset(
    [
        "base_model",
        "micro_batch_size",
        "sequence_len",
        "num_epochs",
        "sample_packing",
        "lr_scheduler",
        "optimizer",
        "adapter",
        "datasets",
        "rl",
        "train_on_inputs",
        "val_set_size",
        "lora_target_linear",
    ]
)
TRL_KEYS = frozenset(
    [
        "dataset_name",
        "dataset_mixture",
        "dataset_mixer",
        "max_seq_length",
        "max_length",
        "packing",
        "packing_strategy",
        "assistant_only_loss",
        "beta",
        "use_peft",
        "chat_template",
        "dataset_text_field",
        "max_prompt_length",
        "completion_only_loss",
        "model_revision",
    ]
)
DPO_KEYS = frozenset({"beta", "max_prompt_length", "precompute_ref_log_probs"})


def source_tool(recipe: Mapping[str, Any]) -> tuple[str, dict[str, object]]:
    """Which tool the recipe is written for, and the defaults it trains with where the recipe is silent."""
    if AXOLOTL_KEYS & recipe.keys():
        if recipe.get("rl") in ("dpo", "ipo"):
            return "axolotl DPO", AXOLOTL_DPO_DEFAULTS
        return "axolotl", AXOLOTL_DEFAULTS
    if DPO_KEYS & recipe.keys():
        return "TRL DPO", TRL_DPO_DEFAULTS
    if TRL_KEYS & recipe.keys():
        return "TRL SFT", TRL_SFT_DEFAULTS
    return "Trainer", TRAINER_DEFAULTS


ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw", "paged_adamw_32bit", "adamw_apex_fused")
"""`optim` (axolotl: `optimizer`) values that are torch's AdamW with 32-bit state, which dockyard's trainer runs
(the paged variant only moves that state to host memory under pressure)."""

ADAMW_8BIT = ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "adamw_torch_8bit", "adamw_torchao_8bit")
"""AdamW with its moments held in 8 bits (bitsandbytes', torchao's): ported as AdamW, whose state is fp32."""

NEUTRAL = frozenset(
    """output_dir overwrite_output_dir logging_dir logging_strategy logging_first_step log_on_each_node
    logging_nan_inf_filter include_num_input_tokens_seen log_level log_level_replica disable_tqdm run_name
    project trackio_space_id trackio_bucket_id trackio_static_space_id eval_delay per_device_eval_batch_size
    prediction_loss_only eval_on_start eval_do_concat_batches eval_use_gather_object eval_accumulation_steps
    include_for_metrics batch_eval_metrics save_only_model save_on_each_node save_total_limit
    enable_jit_checkpoint save_safetensors push_to_hub hub_token hub_private_repo hub_model_id hub_strategy
    hub_always_push hub_revision metric_for_best_model greater_is_better skip_memory_metrics do_train do_eval
    do_predict local_rank use_cpu dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers
    dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order dataloader_drop_last
    ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend ddp_timeout
    accelerator_config debug tf32 use_cache torch_empty_cache_steps bf16_full_eval fp16_full_eval label_names
    length_column_name remove_unused_columns average_tokens_across_devices torch_compile_backend
    torch_compile_mode use_liger_kernel liger_kernel_config gradient_checkpointing_kwargs
    activation_checkpointing_kwargs train_sampling_strategy dataset_num_proc flash_attention sdp_attention
    xformers_attention strict wandb_entity wandb_name wandb_watch wandb_log_model wandb_project
    dataset_prepared_path attn_implementation torch_dtype dtype bfloat16 float16 model_type tokenizer_type
    trust_remote_code saves_per_epoch evals_per_epoch eval_batch_size eval_sample_packing eval_table_size
    eval_max_new_tokens eval_causal_lm_metrics do_causal_lm_eval loss_watchdog_threshold loss_watchdog_patience
    resize_token_embeddings_to_32x fp16_opt_level half_precision_backend fp16_backend ray_scope mp_parameters
    use_mps_device no_cuda jit_mode_eval use_ipex tpu_num_cores tpu_metrics_debug xpu_backend torchdynamo
    use_legacy_prediction_loop include_tokens_per_second include_inputs_for_metrics push_to_hub_model_id
    push_to_hub_organization push_to_hub_token dispatch_batches split_batches _n_gpu
    __cached__setup_devices distributed_state deepspeed_plugin predict_with_generate generation_max_length
    generation_num_beams generation_config evaluation_strategy lora_model_dir env""".split()  # noqa: SIM905 (a list literal would take a line a name)
)
"""Keys of where and how a run is logged, saved, evaluated, shared, loaded or scheduled on devices (kernels,
attention implementations, load dtypes, transformers 4.x's device and backend switches): not what it
trains."""

REFUSED: dict[str, str] = {
    "label_smoothing_factor": "dockyard's loss has no label smoothing",
    "neftune_noise_alpha": "dockyard adds no noise to the embeddings",
    "optim_args": "dockyard's AdamW takes adam_beta1, adam_beta2 and adam_epsilon only",
    "optim_target_modules": "dockyard's AdamW trains every parameter",
    "auto_find_batch_size": "dockyard fits the batch when planning (parallelism.micro_batch=auto)",
    "full_determinism": "dockyard seeds its runs (trainer.seed) but does not force deterministic kernels",
    "fsdp": "choose parallelism=fsdp (or fsdp-hybrid) instead",
    "deepspeed": "choose parallelism=zero1, zero2 or zero3 instead",
    "parallelism_config": "set parallelism.tp / parallelism.pp instead",
    "resume_from_checkpoint": "resume with dockyard launch --resume RUN",
    "load_best_model_at_end": "dockyard keeps the final model",
    "ignore_data_skip": "a resumed dockyard run always continues its data where it stopped",
    "restore_callback_states_from_checkpoint": "dockyard's trainer has no callbacks",
    "group_by_length": "dockyard's batches follow the data's seeded order, not its lengths",
}
"""Keys that change what is trained in a way dockyard does not, unless left empty: why, and what to do."""

DATA_KEYS = frozenset(
    [
        "datasets",
        "dataset_name",
        "dataset_mixture",
        "dataset_mixer",
        "dataset_splits",
        "dataset_config",
        "dataset_train_split",
        "dataset_test_split",
        "train_file",
        "validation_file",
    ]
)
"""The keys that name a recipe's data, as Hub datasets or files."""

DATA_WHY = (
    "a recipe's own files are not read: give their folder as data=hf data.name=FOLDER (alpaca and ShareGPT rows "
    "read as chat, pairs with or without a prompt as preference)"
)
"""Why `train_file`/`validation_file` are refused (the Hub datasets the other data keys name are ported)."""


@dataclass
class Conversion:
    overrides: dict[str, object] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    """`key: why`, one line each."""
    ignored: list[str] = field(default_factory=list)
    """Neutral keys the recipe sets: nothing to port."""
    notes: list[str] = field(default_factory=list)
    """`key: what changed`, for a port that is not exact."""

    def set(self, key: str, value: object) -> None:
        self.overrides[key] = value

    def refuse(self, key: str, why: str) -> None:
        self.refused.append(f"{key}: {why}")

    def lines(self) -> list[str]:
        return [f"{key}={shown(value)}" for key, value in self.overrides.items()]


Handler = Callable[[Conversion, str, Any, dict], None]


class Text(str):
    """A value that is any text (a chat template: braces, quotes, lines), written as Hydra's quoted string."""


def quoted(text: str) -> str:
    """`text` in Hydra's single quotes, read back unchanged by Hydra and OmegaConf: a quote and the backslashes
    before it escaped, as are trailing backslashes and `${` (which OmegaConf would read as an interpolation).
    Lines stay lines: Hydra reads a quoted value across them."""
    text = re.sub(r"(\\*)'", lambda found: found.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\*)\Z", lambda found: found.group(1) * 2, text)
    text = re.sub(r"(\\*)\$\{", lambda found: found.group(1) * 2 + "\\${", text)
    return f"'{text}'"


def shown(value: object) -> str:
    """A value as an override writes it (Hydra's true, false, [a,b], floats without trailing zeros, and `Text`
    quoted)."""
    if isinstance(value, Text):
        return quoted(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(shown(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)
