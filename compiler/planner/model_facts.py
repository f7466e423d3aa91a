"""What the planner knows of a model, computed once by its family (`compiler.planner.models`) and read by the
estimators (`estimate`, `speed`) without calling back into it.

Parameters are counted by part; the repeated blocks' parts are the whole model's sums, so a block is their
mean over the layers (exact where every layer is alike; a mixture of experts whose first layers are dense
spreads those over the pipeline stages evenly). Routed experts are the mixture-of-experts weights a token
reaches `experts_per_token` of: they count whole in `parameters` and by that share in `active_parameters`.
"""

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Parts:
    """Parameters by part, of the whole model or of its blocks."""

    embeddings: int = 0
    """Token (and learned position) embeddings."""
    head: int = 0
    """The output head's own weights (none when tied to the embeddings)."""
    attention: int = 0
    dense_mlp: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    """Experts every token passes through (DeepSeek's, Qwen2-MoE's with its gate)."""
    router: int = 0
    norms: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, part.name) for part in fields(self))


@dataclass(frozen=True)
class ModelFacts:
    layers: int
    """The repeated blocks a pipeline splits into stages."""
    parameters: Parts
    """The whole model's parameters, by part."""
    blocks: Parts
    """The repeated blocks' share of `parameters` (all layers together)."""
    input_side: int
    """What the first pipeline stage holds beside its blocks: the embeddings."""
    output_side: int
    """What the last stage holds beside its blocks where it also holds the first (final norm, head)."""
    output_side_alone: int
    """The same on a last stage without the embeddings (with tied embeddings, the built-in decoder's own copy
    of them)."""
    tp_kept: int
    """Parameters of one block tensor parallelism keeps whole on every rank (its norms)."""
    head_matmul: int
    """Parameters the output projection multiplies by (vocab × hidden, tied or not)."""
    active_fraction: float
    """The share of the routed experts one token uses: experts_per_token / experts (1 without experts)."""
    attention_flops_per_token: float
    """Attention's score and value FLOPs per token of one block, forward and backward."""
    activation_elements: dict[str, float] = field(default_factory=dict)
    """Per token of one block, the elements its backward keeps, by kind: 'residual' (whole on every
    tensor-parallel rank, in the residual stream's precision), 'whole' (whole, compute precision), 'split'
    (split over the tensor-parallel ranks, compute precision), 'split_fp32' (split, fp32), 'recomputed_fp32'
    (the part of split_fp32 attention recomputation does not keep) and 'input' (the block's input, residual
    precision: what full recomputation keeps)."""
    lora: int = 0
    """Parameters of the low-rank adapters `model.lora` adds."""
    dispatched_per_token: int = 0
    """Elements one token sends to its experts in one block, and gets back: experts_per_token × hidden (0
    without experts)."""
    moe_layers: int = 0
    """Blocks with routed experts."""

    @property
    def total(self) -> int:
        return self.parameters.total

    @property
    def active_parameters(self) -> int:
        """Parameters one token passes through: all but the routed experts it is not sent to."""
        return round(self.total - self.parameters.routed_experts * (1 - self.active_fraction))

    @property
    def layer(self) -> float:
        """Parameters of one block (their mean over the layers)."""
        return self.blocks.total / self.layers

    @property
    def layer_experts(self) -> float:
        """Routed expert parameters of one block (their mean)."""
        return self.blocks.routed_experts / self.layers

    @property
    def layer_tp_split(self) -> float:
        """Parameters of one block tensor parallelism splits over its ranks: all but the norms."""
        return self.layer - self.tp_kept

    @property
    def layer_active(self) -> float:
        """Parameters one token passes through in one block (their mean)."""
        return self.layer - self.layer_experts * (1 - self.active_fraction)

    def parameter_count(self, layers: int, first: bool, last: bool) -> int:
        """Trainable parameters of `layers` blocks, with the input and/or output side."""
        outer = (self.input_side if first else 0) + (
            (self.output_side if first else self.output_side_alone) if last else 0
        )
        return outer + round(layers * self.layer)

    def flops_per_token(self, layers: int, last: bool, tp: int, vocab: int = 1) -> float:
        """Model FLOPs per token (forward and backward) of `layers` blocks and the output side when `last`,
        split over `tp` ranks (the output head over `vocab`: loss parallelism's): 6 × the parameters a token is
        multiplied by, and attention's own."""
        matmul = layers * self.layer_active / tp + (self.head_matmul / vocab if last else 0)
        return 6 * matmul + layers * self.attention_flops_per_token / tp

    def matmul_parameters(self, layers: int, last: bool, tp: int) -> float:
        """Parameters a rank multiplies by (autocast keeps a low-precision copy of each): its share of its
        blocks, and the whole output head."""
        return layers * self.layer / tp + (self.head_matmul if last else 0)
