"""`model.family=hf`: a Hugging Face causal LM built by `transformers` from the checkpoint's config.json, and
its weights read from the checkpoint's safetensors.

The module is always built on the meta device and filled after the engine has wrapped or sharded it
(`builds_empty`): torch.distributed.checkpoint's Hugging Face reader then reads into each rank's tensors only
the slices that rank holds (an FSDP2 or tensor-parallel shard; the whole tensor under DDP, which keeps a
whole copy anyway). Under ZeRO-3 the parameters are filled one gathered parameter at a time on rank 0.

With `model.lora.rank` > 0 `peft` wraps the model: the checkpoint's weights stay frozen and only the adapters
train. The trainer's names are then peft's (`base_model.model.<name>`, `<linear>.base_layer.weight`); the
checkpoint's are the plain model's. With `model.lora.quantize_base` the frozen linear layers are then held
quantized (`quantized`: QLoRA).
"""

import re
import types
from functools import partial
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

from compiler.spec.schema import BaseQuantization, Checkpointing, Init, ModelConfig
from compiler.spec.schema.model import ALL_LINEAR
from compiler.spec.trainable import KEY as TRAINABLE
from compiler.spec.trainable import chosen
from entrypoint.trainer.context_parallel import ContextParallel
from entrypoint.trainer.models.conversion import checkpoint_map, converted_tensor
from entrypoint.trainer.models.experts import EXPERT_OFFSET, held_rows
from entrypoint.trainer.models.hf_files import (
    PretrainedFiles,
    checkpoint_name,
    checkpoint_names,
    is_adapter,
    read_tensor,
)
from entrypoint.trainer.models.loss import mean_cross_entropy, token_logps
from entrypoint.trainer.models.packed import document_mask, unpacked
from entrypoint.trainer.models.pretrained_context import DOCUMENT_MASK, use_context_parallel
from entrypoint.trainer.models.quantized import quantize_base
from entrypoint.trainer.models.weights import WeightsFormat
from entrypoint.trainer.offload import ActivationOffload

TP_STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
LAYER_PATTERN = re.compile(r"^(?:.*\.)?layers\.\*\.")


class PretrainedSpec:
    """The `hf` entry of `entrypoint.trainer.models.MODELS`."""

    name = "hf"
    builds_empty = True
    weights: WeightsFormat = PretrainedFiles()
    """The source checkpoint's Hugging Face layout, with LoRA merged and the adapter beside it."""

    def loss(self, output, targets: torch.Tensor) -> torch.Tensor:
        return mean_cross_entropy(output.logits, targets)

    def build(self, config: ModelConfig) -> nn.Module:
        from transformers import AutoConfig, AutoModelForCausalLM

        hf_config = AutoConfig.from_pretrained(config.path)
        hf_config.use_cache = False
        model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa", dtype=torch.float32)
        if config.lora.rank:
            model = with_lora(model, config)
        elif config.trainable_parameters:
            freeze_all_but(model, config.trainable_parameters)
        model.dockyard_config = config
        model.dockyard_context = None
        _stream_output_projection(model.get_output_embeddings())
        model.register_forward_pre_hook(_packed_arguments, with_kwargs=True)
        return model

    def init_weights(self, module: nn.Module) -> None:
        """Fill a model materialised from the meta device: the checkpoint's weights (or the architecture's own
        initialisation), the adapters' initialisation, and the buffers that are not in any checkpoint
        (rotary frequencies)."""
        config: ModelConfig = module.dockyard_config
        base = module.get_base_model() if config.lora.rank else module
        if config.tied_embeddings and base.get_output_embeddings().weight is not base.get_input_embeddings().weight:
            base.tie_weights()  # to_empty gave each module its own tensor (FSDP2's swap keeps them shared)
        if config.init is Init.pretrained:
            load_checkpoint(module, Path(config.path))
        else:
            for part in base.modules():
                part._is_hf_initialized = False
            base.initialize_weights()
        with torch.no_grad():
            for part in base.modules():
                if any(name in part._non_persistent_buffers_set for name, _ in part.named_buffers(recurse=False)):
                    base._init_weights(part)
        if config.lora.rank:
            reset_adapters(module)
        if config.lora.quantize_base is not BaseQuantization.none:
            quantize_base(base, config)

    def init_parameter(self, module: nn.Module, name: str, param: torch.Tensor) -> None:
        """ZeRO-3: one gathered parameter on rank 0, from the checkpoint. Adapters start as peft starts them
        (A Kaiming-uniform, B zero); model.init=random draws N(0, initializer_range) for matrices, ones for
        norms and zeros for biases (transformers' scheme, not its exact draws)."""
        config: ModelConfig = module.dockyard_config
        with torch.no_grad():
            if is_adapter(name):
                if ".lora_B." in name:
                    param.zero_()
                else:
                    nn.init.kaiming_uniform_(param, a=5**0.5)
            elif config.init is Init.pretrained:
                param.copy_(_whole_tensor(module, Path(config.path), checkpoint_name(name)))
            elif param.dim() == 1:
                param.fill_(1.0 if "norm" in name else 0.0)
            else:
                param.normal_(0.0, getattr(module.config, "initializer_range", 0.02))

    def blocks(self, module: nn.Module) -> list[nn.Module]:
        """The decoder layers: the modules transformers itself never splits across devices."""
        layer_classes = set(getattr(module, "_no_split_modules", None) or [])
        if hasattr(module, "get_base_model"):
            layer_classes |= set(module.get_base_model()._no_split_modules or [])
        return [part for part in module.modules() if type(part).__name__ in layer_classes]

    def tp_plan(self, config: ModelConfig) -> dict[str, ParallelStyle]:
        """transformers' own plan for the architecture, its `layers.*.` entries as names inside one layer."""
        from transformers import AutoConfig

        plan: dict[str, ParallelStyle] = {}
        for pattern, style in (AutoConfig.from_pretrained(config.path).base_model_tp_plan or {}).items():
            if not LAYER_PATTERN.match(pattern):
                continue
            if style not in TP_STYLES:
                raise NotImplementedError(f"{config.architecture}'s tensor-parallel plan uses {style} for {pattern}")
            inner = LAYER_PATTERN.sub("", pattern)
            plan[f"{inner}.base_layer" if config.lora.rank and _adapted(inner, config) else inner] = TP_STYLES[style]()
        if not plan:
            raise NotImplementedError(f"transformers has no tensor-parallel plan for {config.architecture}")
        return plan

    def output_projection(self, module: nn.Module) -> nn.Module | None:
        return None if module.dockyard_config.tied_embeddings else module.get_output_embeddings()

    def stage(self, module: nn.Module, layers: range, first: bool, last: bool) -> nn.Module:
        raise NotImplementedError("model=hf runs without pipeline parallelism (the planner refuses pp > 1)")

    def tied_parameter(self, config: ModelConfig) -> str | None:
        return None

    def set_checkpointing(self, module: nn.Module, mode: Checkpointing, every: int = 1) -> None:
        """Full recomputation of each decoder layer, or of layers 0, k, 2k, ... (transformers' every_n_layers;
        the planner refuses selective for hf)."""
        if mode is Checkpointing.full:
            options = {"every_n_layers": every} if every > 1 else {}
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False}, **options)

    def set_activation_offload(self, module: nn.Module, offload: ActivationOffload) -> None:
        raise NotImplementedError("model=hf runs without activation offload (the planner refuses it)")

    def set_context_parallel(self, module: nn.Module, context: ContextParallel) -> None:
        """Each forward runs this rank's part of the sequences (`_packed_arguments`), attention over the whole of
        them (`pretrained_context`)."""
        module.dockyard_context = context
        use_context_parallel(module.get_base_model() if module.dockyard_config.lora.rank else module, context)


def _adapted(linear: str, config: ModelConfig) -> bool:
    return any(linear.endswith(target) for target in config.lora.targets)


def _packed_arguments(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A packed window (`models.packed`) becomes input_ids and position_ids: with no attention mask,
    transformers' causal mask then keeps attention inside each document (`find_packed_sequence_indices`).
    The streamed loss's `targets` and `loss_chunk` (the built-in decoder's forward arguments) go to the
    output projection (`_stream_output_projection`), not to transformers.

    Under context parallelism the model gets this rank's part of the sequences at their true positions, and
    the attention function a packed window's whole document mask (`pretrained_context`)."""
    targets, chunk = kwargs.pop("targets", None), kwargs.pop("loss_chunk", 0)
    tokens, positions = unpacked(args[0]) if args else (None, None)
    context: ContextParallel | None = module.dockyard_context
    gather = None
    if context is not None and tokens is not None:
        gather = partial(context.whole_sequence, seq=tokens.shape[1])
        kwargs[DOCUMENT_MASK] = None if positions is None else document_mask(positions)
        tokens, positions, targets = context.own_part(tokens, positions, targets)
    module.get_output_embeddings().streamed = None if targets is None else (targets, chunk, gather)
    if positions is None:
        return args, kwargs
    return (tokens, *args[1:]), {**kwargs, "position_ids": positions}


def _stream_output_projection(head: nn.Module) -> None:
    """Make the output projection return each target's log-probability (`loss.token_logps`) instead of the
    logits when the forward pass was given targets: transformers' causal LMs hand the projection's output
    back as `logits` and compute no loss of their own without labels. A bound method, so that a deep copy of
    the model (DPO's reference) streams through its own projection."""
    head.streamed = None
    head.forward = types.MethodType(_streamed_forward, head)


def _streamed_forward(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    def project(part: torch.Tensor) -> torch.Tensor:
        return type(head).forward(head, part)

    if head.streamed is None:
        return project(hidden)
    targets, chunk, gather = head.streamed
    logps = token_logps(hidden, project, targets, chunk)
    return logps if gather is None else gather(logps)


def with_lora(model: nn.Module, config: ModelConfig) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = config.lora
    adapters = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=ALL_LINEAR if list(lora.targets) == [ALL_LINEAR] else list(lora.targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, adapters)


def freeze_all_but(model: nn.Module, patterns: list[str]) -> None:
    """`model.trainable_parameters`: only the parameters a pattern matches train, before the engine wraps the
    model and the optimizer takes its trainable parameters. The planner checked the patterns against the
    checkpoint's names; a pattern that matches none of the model's (another naming than the checkpoint's) stops
    the run here rather than freezing what it meant to train."""
    names = [name for name, _ in model.named_parameters()]
    trained, unmatched = chosen(patterns, names)
    if unmatched:
        raise ValueError(f"{TRAINABLE}: {unmatched[0]!r} matches no parameter of the model (like {names[0]})")
    for name, param in model.named_parameters():
        param.requires_grad_(name in trained)


def reset_adapters(module: nn.Module) -> None:
    """peft's own initialisation of every adapter (A random, B zero: training starts from the base model)."""
    from peft.tuners.lora import LoraLayer

    for part in module.modules():
        if isinstance(part, LoraLayer):
            for adapter in part.lora_A:
                part.reset_lora_parameters(adapter, init_lora_weights=True)


def load_checkpoint(module: nn.Module, folder: Path) -> None:
    """Read the checkpoint into the module's tensors in place, each rank only the slices it holds: plain tensors
    through DCP's Hugging Face reader, fused experts from their per-expert tensors (`conversion`), only the
    experts this rank holds.

    A name the checkpoint lacks is an error unless the parameter is tied to one it has (the output head
    shares the embedding's weight, and save_pretrained writes it once) or is an adapter."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    config: ModelConfig = module.dockyard_config
    base = module.get_base_model() if config.lora.rank else module
    mapping = checkpoint_map(base, checkpoint_names(folder))
    wanted, missing = {}, []
    seen: dict[int, str] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        source = checkpoint_name(name)
        if is_adapter(name):
            continue
        if source in mapping.renamed:
            wanted[mapping.renamed[source]] = tensor
        elif source in mapping.converted:
            _fill_experts(tensor, mapping, base, source, partial(read_tensor, folder), _expert_offset(module, name))
        elif id(tensor) not in seen:
            missing.append(source)
        seen.setdefault(id(tensor), source)
    if missing:
        raise RuntimeError(f"the checkpoint in {folder} lacks {len(missing)} of the model's weights: {missing[:3]}")
    dcp.load(wanted, storage_reader=HuggingFaceStorageReader(str(folder)))


def _whole_tensor(module: nn.Module, folder: Path, name: str) -> torch.Tensor:
    """One whole parameter from the checkpoint, by its name in the plain model (fused experts from their
    per-expert tensors); the checkpoint's names are mapped once per model."""
    base = module.get_base_model() if module.dockyard_config.lora.rank else module
    if not hasattr(module, "dockyard_checkpoint_map"):
        module.dockyard_checkpoint_map = checkpoint_map(base, checkpoint_names(folder))
    mapping = module.dockyard_checkpoint_map
    if name in mapping.converted:
        experts = range(base.get_parameter(name).shape[0])
        return converted_tensor(mapping, base, name, experts, partial(read_tensor, folder))
    return read_tensor(folder, mapping.renamed[name])


def _expert_offset(module: nn.Module, name: str) -> int:
    """The first expert this rank's expert-parallel group holds (`experts.ExpertParallel`); 0 without."""
    return getattr(module.get_submodule(name.rsplit(".", 1)[0]), EXPERT_OFFSET, 0)


def _fill_experts(tensor: torch.Tensor, mapping, model: nn.Module, name: str, read, offset: int) -> None:
    """A fused expert tensor (an FSDP2 shard of it, or the whole), from only the experts it holds."""
    local, start = held_rows(tensor)
    experts = range(offset + start, offset + start + local.shape[0])
    if not experts:
        return
    with torch.no_grad():
        local.copy_(converted_tensor(mapping, model, name, experts, read))
