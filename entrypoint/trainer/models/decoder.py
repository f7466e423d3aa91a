"""The built-in decoder (`model.family=decoder`): GPT-2 and Llama style from one `ModelConfig`, and its
registry entry: its tensor-parallel plan, its pipeline stages, its weights' files.

GPT-2: learned positions, LayerNorm, GELU, biases, tied embeddings. Llama: RoPE, RMSNorm, SwiGLU,
no biases, grouped-query attention. The parameter count matches the planner's (`compiler.planner.models`)
exactly (tested), so the plan's numbers describe the model that trains.

Attention reads the number of heads from the projections' output width, so the same code runs with
the q/k/v projections split over tensor-parallel ranks (each rank then holds heads / tp heads).
"""

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel
from torch.utils.checkpoint import checkpoint

from compiler.spec.schema import Activation, Checkpointing, ModelConfig, Norm, Position
from entrypoint.trainer.context_parallel import ContextParallel
from entrypoint.trainer.models.decoder_hf import DecoderWeights
from entrypoint.trainer.models.loss import mean_cross_entropy, token_logps
from entrypoint.trainer.models.packed import document_mask, unpacked
from entrypoint.trainer.models.recompute import recomputed
from entrypoint.trainer.models.weights import WeightsFormat
from entrypoint.trainer.offload import ActivationOffload

Rope = tuple[torch.Tensor, torch.Tensor]
"""cos and sin of the rotary angles at the tokens' positions, broadcastable to (batch, heads, seq, head_dim / 2)."""


def _norm(model: ModelConfig) -> nn.Module:
    if model.norm is Norm.rmsnorm:
        return nn.RMSNorm(model.hidden, eps=1e-5)
    return nn.LayerNorm(model.hidden, eps=1e-5, bias=model.bias)


def rope_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, shape (length, head_dim / 2)."""
    inverse = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inverse)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of every head of x (batch, heads, seq, head_dim)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, model: ModelConfig) -> None:
        super().__init__()
        self.head_dim = model.hidden // model.heads
        kv_width = model.kv_heads * self.head_dim
        self.q = nn.Linear(model.hidden, model.hidden, bias=model.bias)
        self.k = nn.Linear(model.hidden, kv_width, bias=model.bias)
        self.v = nn.Linear(model.hidden, kv_width, bias=model.bias)
        self.o = nn.Linear(model.hidden, model.hidden, bias=model.bias)
        self.checkpoint_core = False
        """Selective activation checkpointing: recompute only softmax(QKᵀ)V in the backward pass."""
        self.context: ContextParallel | None = None
        """parallelism.cp > 1: the group whose ranks hold the rest of the sequence."""

    def forward(self, x: torch.Tensor, rope: Rope | None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`rope`: the rotary tables at the tokens' positions; `mask`: a packed window's document mask."""
        batch, seq, _ = x.shape
        q, k, v = (proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        attend = _attend if self.context is None else self.context.around(_attend)
        if self.checkpoint_core and self.training:
            out = checkpoint(attend, q, k, v, mask, use_reentrant=False)
        else:
            out = attend(q, k, v, mask)
        return self.o(out.transpose(1, 2).reshape(batch, seq, -1))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Causal attention, or the block-diagonal causal `mask` of a packed window (which SDPA runs with its
    memory-efficient or math kernel rather than flash attention)."""
    gqa = k.shape[1] != q.shape[1]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def rope_at(cos: torch.Tensor, sin: torch.Tensor, seq: int, positions: torch.Tensor | None) -> Rope:
    """The rotary tables for tokens at 0..seq-1, or at each packed token's `positions` (batch, seq)."""
    if positions is None:
        return cos[:seq], sin[:seq]
    return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)


class MLP(nn.Module):
    def __init__(self, model: ModelConfig) -> None:
        super().__init__()
        self.gated = model.activation is Activation.swiglu
        self.up = nn.Linear(model.hidden, model.ffn_hidden, bias=model.bias)
        self.gate = nn.Linear(model.hidden, model.ffn_hidden, bias=model.bias) if self.gated else None
        self.down = nn.Linear(model.ffn_hidden, model.hidden, bias=model.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, model: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = _norm(model)
        self.attention = Attention(model)
        self.mlp_norm = _norm(model)
        self.mlp = MLP(model)

    def forward(self, x: torch.Tensor, rope: Rope | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope, mask)
        return x + self.mlp(self.mlp_norm(x))


class TokenEmbedding(nn.Embedding):
    """The token embedding, also the output projection when embeddings are tied.

    Both uses go through `forward`, so wrappers that gather parameters around a module's forward
    (DeepSpeed ZeRO-3) see the weight used as the output layer too.
    """

    def forward(self, x: torch.Tensor, project: bool = False) -> torch.Tensor:
        return x @ self.weight.t() if project else super().forward(x)


class Decoder(nn.Module):
    def __init__(self, model: ModelConfig) -> None:
        super().__init__()
        self.config = model
        self.embed = TokenEmbedding(model.vocab, model.hidden)
        self.positions = nn.Embedding(model.context, model.hidden) if model.position is Position.learned else None
        self.blocks = nn.ModuleList(Block(model) for _ in range(model.layers))
        self.norm = _norm(model)
        self.head = None if model.tied_embeddings else nn.Linear(model.hidden, model.vocab, bias=False)
        if model.position is Position.rope:
            half = model.hidden // model.heads // 2
            self.register_buffer("rope_cos", torch.empty(model.context, half), persistent=False)
            self.register_buffer("rope_sin", torch.empty(model.context, half), persistent=False)
        self.recompute: Callable[..., torch.Tensor] | None = None
        """How each block is recomputed in the backward (`models.recompute`); None: it is not."""
        self.recompute_every = 1
        """Only blocks 0, k, 2k, ... are recomputed (`parallelism.activation_checkpointing_every`)."""
        self.context: ContextParallel | None = None
        """parallelism.cp > 1: this rank runs its part of each sequence (`context_parallel`)."""
        self.offload: ActivationOffload | None = None
        """Set by the engine for `parallelism.activation_offload`: where each block's saved tensors go."""
        self.reset_parameters()

    def set_checkpointing(self, mode: Checkpointing, every: int = 1) -> None:
        """full: recompute each block in the backward pass (with `every` = k, blocks 0, k, 2k, ... only);
        selective: the op-level policy (`models.recompute`); attention: only the attention core."""
        self.recompute, self.recompute_every = recomputed(mode), every
        for block in self.blocks:
            block.attention.checkpoint_core = mode is Checkpointing.attention

    def reset_parameters(self) -> None:
        """Also run after a model built on the meta device is materialised, shard by shard."""
        _initialise(self, self.positions is None)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None, loss_chunk: int = 0) -> torch.Tensor:
        """Logits (batch, seq, vocab) for tokens (batch, seq) or a packed window (`models.packed`); with
        `targets`, each target's log-probability (batch, seq) instead, streamed `loss_chunk` tokens at a time
        (`loss.token_logps`), so the whole logits never exist."""
        tokens, positions = unpacked(inputs)
        whole = tokens.shape[1]
        mask = None if positions is None else document_mask(positions)
        if self.context is not None:  # this rank's part, at its true positions
            tokens, positions, targets = self.context.own_part(tokens, positions, targets)
        x = self.embed(tokens)
        seq = tokens.shape[1]
        if self.positions is not None:
            x = x + self.positions(torch.arange(seq, device=tokens.device) if positions is None else positions)
        rope = None if self.positions is not None else rope_at(self.rope_cos, self.rope_sin, seq, positions)
        offload = self.offload if self.training else None
        for index, block in enumerate(self.blocks):
            with offload.saving(index) if offload else nullcontext():
                recompute = self.recompute if self.training and index % self.recompute_every == 0 else None
                x = recompute(block, x, rope, mask) if recompute else block(x, rope, mask)
            if offload:
                x = offload.prefetch_from(x, index)
        x = self.norm(x)
        if targets is None:
            return self.project(x)
        logps = token_logps(x, self.project, targets, loss_chunk)
        return logps if self.context is None else self.context.whole_sequence(logps, whole)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The output projection: final hidden states → logits."""
        return self.embed(x, project=True) if self.head is None else self.head(x)


@torch.no_grad()
def init_parameter(config: ModelConfig, name: str, param: torch.Tensor) -> None:
    """GPT-2's initialisation of one parameter: N(0, 0.02), residual projections scaled by
    1/sqrt(2 × layers); norms' weights one, biases zero."""
    if param.dim() == 1:
        nn.init.ones_(param) if name.endswith("norm.weight") else nn.init.zeros_(param)
    else:
        residual = name.endswith(("o.weight", "down.weight"))
        nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.layers) if residual else 0.02)


@torch.no_grad()
def _initialise(module: "Decoder | Stage", rope: bool) -> None:
    """Every parameter of a decoder or a stage, named as in the whole decoder, and the RoPE tables."""
    config = module.config
    if rope:
        cos, sin = rope_tables(config.hidden // config.heads, config.context, config.rope_theta)
        module.rope_cos.copy_(cos)
        module.rope_sin.copy_(sin)
    for name, param in module.named_parameters():
        init_parameter(config, name, param)


class Stage(nn.Module):
    """Layers `layers` of a decoder, with the embeddings on the first stage and the final norm and head on the
    last. The parameters keep the whole decoder's names (`blocks.5.mlp.up.weight`), so a stage's checkpoint
    keys are those of the unpipelined model."""

    def __init__(self, decoder: Decoder, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        self.config, self.first, self.last = decoder.config, first, last
        tied = decoder.head is None
        self.embed = decoder.embed if first or (last and tied) else None
        self.positions = decoder.positions if first else None
        self.blocks = nn.ModuleDict({str(index): decoder.blocks[index] for index in layers})
        self.norm = decoder.norm if last else None
        self.head = decoder.head if last else None
        self.rope = decoder.positions is None
        if self.rope:
            self.register_buffer("rope_cos", decoder.rope_cos, persistent=False)
            self.register_buffer("rope_sin", decoder.rope_sin, persistent=False)
        self.recompute, self.recompute_every = decoder.recompute, decoder.recompute_every

    def reset_parameters(self) -> None:
        """Initialise a stage materialised from the meta device as the whole decoder initialises its parts."""
        _initialise(self, self.rope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (batch, seq) or the previous stage's hidden states in; hidden states or logits out."""
        if self.first:
            tokens = x
            x = self.embed(tokens)
            if self.positions is not None:
                x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        rope = rope_at(self.rope_cos, self.rope_sin, x.shape[1], None) if self.rope else None
        for index, block in self.blocks.items():  # keyed by the layer's index in the whole model
            recompute = self.recompute if self.training and int(index) % self.recompute_every == 0 else None
            x = recompute(block, x, rope) if recompute else block(x, rope)
        if not self.last:
            return x
        x = self.norm(x)
        return self.embed(x, project=True) if self.head is None else self.head(x)


class DecoderSpec:
    """The decoder's entry in `entrypoint.trainer.models.MODELS`."""

    name = "decoder"
    builds_empty = False
    weights: WeightsFormat = DecoderWeights()
    """Hugging Face's layout (GPT2LMHeadModel, LlamaForCausalLM) where the shape has one, model.pt otherwise."""

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return mean_cross_entropy(output, targets)

    def build(self, config: ModelConfig) -> Decoder:
        return Decoder(config)

    def init_weights(self, module: nn.Module) -> None:
        module.reset_parameters()

    def init_parameter(self, module: nn.Module, name: str, param: torch.Tensor) -> None:
        init_parameter(module.config, name, param)

    def blocks(self, module: nn.Module) -> list[nn.Module]:
        return list(module.blocks.values() if isinstance(module.blocks, nn.ModuleDict) else module.blocks)

    def tp_plan(self, config: ModelConfig) -> dict[str, ParallelStyle]:
        """Megatron-style: q/k/v and the MLP's input projections split by columns (heads, hidden units),
        the output projections by rows."""
        plan: dict[str, ParallelStyle] = {
            "attention.q": ColwiseParallel(),
            "attention.k": ColwiseParallel(),
            "attention.v": ColwiseParallel(),
        }
        plan |= {"attention.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
        if config.activation is Activation.swiglu:
            plan["mlp.gate"] = ColwiseParallel()
        return plan

    def output_projection(self, module: nn.Module) -> nn.Module | None:
        return module.head

    def stage(self, module: nn.Module, layers: range, first: bool, last: bool) -> nn.Module:
        return Stage(module, layers, first, last)

    def tied_parameter(self, config: ModelConfig) -> str | None:
        """The parameter the first and the last pipeline stage each hold a copy of (tied embeddings)."""
        return "embed.weight" if config.tied_embeddings else None

    def set_checkpointing(self, module: nn.Module, mode: Checkpointing, every: int = 1) -> None:
        module.set_checkpointing(mode, every)

    def set_activation_offload(self, module: nn.Module, offload: ActivationOffload) -> None:
        module.offload = offload

    def set_context_parallel(self, module: nn.Module, context: ContextParallel) -> None:
        module.context = context
        for block in module.blocks:
            block.attention.context = context
