"""Activation offload with prefetch (`parallelism.activation_offload`): the trainer's losses and gradients
are those of a run without it (in one process, and through torchrun with DDP and FSDP on CPU), and the
planner moves the offloaded activations from the GPU's breakdown into the node's host memory."""

import copy

import pytest
import torch
from torch import nn

from compiler.planner import estimate
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Checkpointing
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.offload import ActivationOffload
from tests.entrypoint_support import RERUN_TOLERANCE, losses, tiny_plan, train
from tests.helpers import plan_for

STEPS = ("trainer.steps=4", "trainer.checkpoint_interval=0", "hardware.processes_per_node=1")
"""The torchrun runs: one rank, since offload moves each rank's own activations whatever the number of ranks (DDP
and FSDP2 still wrap the model and reduce over gloo at one rank); one thread, as the entrypoint gives each of two ranks
on two CPUs (two threads on a tiny step's small ops wait on each other on loaded cores)."""


def gradients(model: nn.Module, tokens: torch.Tensor, micro_batches: int = 2) -> list[torch.Tensor]:
    for _ in range(micro_batches):  # accumulating, as grad_accum does: each backward reads its own forward's
        MODELS["decoder"].loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
    return [param.grad for param in model.parameters()]


@pytest.mark.heavy
@pytest.mark.parametrize("checkpointing", [mode for mode in Checkpointing if mode is not Checkpointing.selective])
@pytest.mark.parametrize("horizon", [0, 2, 99])
def test_the_offloaded_model_computes_the_same_gradients(checkpointing, horizon):
    plan = tiny_plan("parallelism=ddp")
    torch.manual_seed(0)
    plain = MODELS["decoder"].build(plan.model)
    plain.set_checkpointing(checkpointing)
    offloaded = copy.deepcopy(plain)
    offloaded.offload = ActivationOffload(torch.device("cpu"), horizon)
    moved = []
    to_host = offloaded.offload._to_host
    offloaded.offload._to_host = lambda tensor: moved.append(tensor.shape) or to_host(tensor)
    tokens = torch.randint(plan.model.vocab, (2, plan.model.seq_len + 1), generator=torch.Generator().manual_seed(1))
    for expected, got in zip(gradients(plain, tokens), gradients(offloaded, tokens), strict=True):
        assert torch.equal(expected, got)
    hidden = (2, plan.model.seq_len, plan.model.hidden)
    if checkpointing is Checkpointing.full:
        assert moved == [hidden] * plan.model.layers * 2  # each block's input, twice (two micro batches)
    else:
        assert len(moved) > 4 * plan.model.layers * 2  # every tensor each block saves
    assert offloaded.offload.blocks == {}  # every host copy read back once and let go


@pytest.mark.parametrize(
    "overrides",
    [("parallelism=ddp", "parallelism.activation_checkpointing=full"), ("parallelism=fsdp",)],
    ids=["ddp-full-checkpointing", "fsdp"],
)
@pytest.mark.torchrun
def test_torchrun_losses_with_and_without_offload_are_equal(tmp_path, overrides):
    plain = train(tiny_plan(*overrides, *STEPS), tmp_path / "plain", OMP_NUM_THREADS="1")
    offloaded = train(
        tiny_plan(*overrides, *STEPS, "parallelism.activation_offload=true"),
        tmp_path / "offloaded",
        OMP_NUM_THREADS="1",
    )
    assert losses(offloaded) == pytest.approx(losses(plain), abs=RERUN_TOLERANCE)
    assert len(losses(plain)) == 4


def test_the_planner_moves_the_offloaded_layers_to_the_host():
    common = ("experiment=llama3-8b-p5x4", "parallelism.activation_checkpointing=none", "hardware.memory_check=false")
    plain = plan_for(*common)
    offloaded = plan_for(*common, "parallelism.activation_offload=true", "parallelism.activation_offload_horizon=1")
    model, par, batch = offloaded.model, offloaded.parallelism, offloaded.batch
    layer = estimate.activation_bytes_per_token(model, par, 1)["layer"] * batch.micro_batch * model.seq_len
    assert plain.estimate.memory.activations - offloaded.estimate.memory.activations == round(
        (model.layers - 2) * layer  # the block whose backward runs and one fetched ahead stay
    )
    per_node = round(model.layers * layer) * offloaded.layout.processes_per_node
    assert offloaded.estimate.host_memory == {"activations": per_node}
    assert plain.estimate.host_memory == {}


def test_offloaded_optimizer_state_is_host_memory_too():
    plan = plan_for("experiment=llama3-8b-p5x4", "parallelism.offload=optimizer")
    states = plan.estimate.host_memory["model states"]
    assert states == pytest.approx(8 * plan.parameters / plan.layout.shard_degree * 8, rel=0.01)  # Adam, 8 GPUs


def test_a_plan_that_needs_offload_is_told_so():
    with pytest.raises(ConfigError) as error:
        # micro batch 2 without recomputation: 92 GiB of activations (micro batch 1 fits with the streamed loss)
        plan_for("experiment=llama3-8b-p5x4", "parallelism.activation_checkpointing=none", "parallelism.micro_batch=2")
    assert "parallelism.activation_offload=true (" in error.value.one_line()


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["parallelism=zero2"], "parallelism.activation_offload", "not zero2"),
        (["parallelism=fsdp", "parallelism.tp=2"], "parallelism.activation_offload", "parallelism.tp > 1"),
        (["parallelism.pp=2", "parallelism=fsdp"], "parallelism.activation_offload", "parallelism.pp > 1"),
        (["parallelism.activation_offload_horizon=-1"], "parallelism.activation_offload_horizon", "negative"),
        (
            [
                "experiment=gpt2-124m-p4d",
                "hardware=g5.xlarge",
                "hardware.nodes=1",
                "model.vocab=1024",
                "parallelism.micro_batch=48",
                "parallelism.global_batch=-1",
                "parallelism.grad_accum=1",
            ],
            "parallelism.activation_offload",
            "15 GiB of host memory per node (activations 15), more than the 13 GiB usable of g5.xlarge's 16 GiB",
        ),
        (
            ["parallelism.activation_checkpointing=selective"],
            "parallelism.activation_offload",
            "moves only each block's input under the op-level selective policy",
        ),
    ],
)
def test_offload_mistakes_name_their_key(overrides, key, message):
    experiment = [] if any(o.startswith("experiment=") for o in overrides) else ["experiment=smoke"]
    with pytest.raises(ConfigError) as error:
        plan_for(*experiment, "parallelism.activation_offload=true", *overrides)
    assert error.value.key == key, error.value.one_line()
    assert message in error.value.one_line()
