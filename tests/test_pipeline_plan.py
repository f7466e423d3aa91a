"""Planning a pipeline: the layout's rank map and stages, the bubble, per-stage memory, point-to-point
traffic, and the fixes that name pp."""

import dataclasses

import pytest

from compiler.planner import estimate, speed
from compiler.planner.pipeline import bubble_fraction, default_microbatches, split_layers
from compiler.planner.summary import summary_lines
from compiler.spec import Layout
from compiler.spec.errors import ConfigError
from tests.helpers import plan_for

LLAMA_70B_PP4 = ("experiment=llama3-70b-p5x16", "parallelism.pp=4", "parallelism.dp=-1")


def layout(dp: int, tp: int, pp: int, **extra) -> Layout:
    world = dp * tp * pp
    return Layout(nodes=1, processes_per_node=world, world_size=world, dp=dp, tp=tp, pp=pp, shard_degree=dp, **extra)


def test_coordinates_put_tp_innermost_and_pp_outermost():
    grid = layout(dp=2, tp=2, pp=2)
    places = [grid.coordinates(rank) for rank in range(8)]
    assert places[:4] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert places[5] == (1, 0, 1)
    assert len(set(places)) == 8
    assert all((p.pp * 2 + p.dp) * 2 + p.tp == rank for rank, p in enumerate(places))
    with pytest.raises(ValueError, match="outside a world of 8"):
        grid.coordinates(8)


def test_mesh_shape_splits_replicas_only_when_the_state_is_replicated():
    assert layout(dp=4, tp=2, pp=2).mesh_shape() == ((2, 4, 2), ("pp", "dp", "tp"))
    ddp = dataclasses.replace(layout(dp=4, tp=1, pp=2), shard_degree=1)
    assert ddp.mesh_shape() == ((2, 4, 1, 1), ("pp", "rep", "dp", "tp"))


def test_interleaved_ranks_loop_over_the_stages():
    grid = layout(dp=1, tp=1, pp=2, stages_per_rank=2, layers_per_stage=(2, 3, 3, 2))
    assert grid.stages == 4
    assert grid.stages_of(0) == (0, 2) and grid.stages_of(1) == (1, 3)
    assert [list(grid.layers_of(stage)) for stage in range(4)] == [[0, 1], [2, 3, 4], [5, 6, 7], [8, 9]]
    assert grid.ranks_per_stage == 1
    assert layout(dp=2, tp=2, pp=2).ranks_per_stage == 4


def test_uneven_split_spares_the_stages_with_embeddings_and_head():
    assert split_layers(80, 4) == (20, 20, 20, 20)
    assert split_layers(10, 4) == (2, 3, 3, 2)
    assert split_layers(11, 4) == (3, 3, 3, 2)
    assert split_layers(5, 2) == (3, 2)


def test_bubble_and_default_micro_batches():
    assert bubble_fraction(1, 8, "1f1b") == 0.0
    assert bubble_fraction(4, 12, "1f1b") == bubble_fraction(4, 12, "gpipe") == pytest.approx(3 / 15)
    assert bubble_fraction(4, 12, "interleaved-1f1b") == pytest.approx(1.5 / 13.5)
    assert bubble_fraction(4, 12, "zero-bubble") == pytest.approx(0.5 / 12.5)
    assert default_microbatches(2, "1f1b") == 6  # 4 would give exactly 20%
    assert default_microbatches(4, "gpipe") == 16
    assert default_microbatches(4, "interleaved-1f1b") == 8
    for pp in (2, 4, 8):
        for schedule in ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"):
            m = default_microbatches(pp, schedule)
            assert m % pp == 0 and bubble_fraction(pp, m, schedule) < 0.2


def test_default_micro_batches_reach_the_plan():
    plan = plan_for("parallelism.pp=2", "model.tied_embeddings=false", "parallelism.grad_accum=-1")
    assert plan.batch.grad_accum == plan.parallelism.pp_microbatches == 6
    assert plan.batch.global_batch == plan.batch.micro_batch * 6 * plan.layout.dp


def test_llama_70b_pp4_summary_shows_stages_memory_and_bubble():
    plan = plan_for(*LLAMA_70B_PP4)
    assert (plan.layout.pp, plan.layout.dp, plan.layout.tp, plan.batch.grad_accum) == (4, 4, 8, 64)
    (line,) = [line for line in summary_lines(plan) if line.startswith("pipeline")]
    assert "1f1b, 4 stages of 20/20/20/20 layers, 64 micro batches, bubble 4.5%" in line
    stages = plan.estimate.stage_memory
    assert len(stages) == 4 and max(stages) == plan.estimate.memory.total
    assert line.endswith(" | ".join(f"{total / 2**30:.1f}" for total in stages))
    assert stages[1] == stages[2] < stages[0] < stages[3]  # the head and the logits weigh more than embeddings
    assert plan.estimate.throughput.bubble == pytest.approx(3 / 67)


def test_stage_shares_add_up_to_the_model():
    plan = plan_for(*LLAMA_70B_PP4)
    shares = estimate.pipeline_shares(plan.model, plan.parallelism, plan.layout)
    assert sum(estimate.parameter_count(plan.model, share) for share in shares) == plan.parameters
    assert [share.in_flight for share in shares] == [4, 4, 4, 4]  # 1F1B: pp micro batches in flight


def test_gpipe_holds_every_micro_batch():
    smaller = (*LLAMA_70B_PP4, "parallelism.global_batch=64", "hardware.memory_check=false")
    one_f_one_b = plan_for(*smaller).estimate.memory
    gpipe = plan_for(*smaller, "parallelism.pp_schedule=gpipe")
    assert gpipe.batch.grad_accum == 16
    assert gpipe.estimate.memory.activations > 3 * one_f_one_b.activations


def test_point_to_point_traffic_and_step_time():
    plan = plan_for(*LLAMA_70B_PP4)
    batch, predicted = plan.batch, plan.estimate.throughput
    activation = batch.micro_batch * batch.seq_len * plan.model.hidden * 2  # bf16
    assert speed.pipeline_bytes(plan.model, plan.parallelism, plan.layout, batch) == 2 * activation * 64
    assert predicted.point_to_point_seconds > 0
    assert predicted.step_seconds * (1 - predicted.bubble) == pytest.approx(
        predicted.compute_seconds + predicted.exposed_communication_seconds
    )
    # The slowest rank is the last stage: a quarter of the layers for four times the sequences (dp 4, not 16)
    # is the unpipelined rank's work, and the output head's on top.
    unpipelined = plan_for("experiment=llama3-70b-p5x16").estimate.throughput
    assert predicted.compute_seconds > unpipelined.compute_seconds


def test_fixes_name_pp_when_the_model_does_not_fit():
    """Hybrid sharding within one node keeps 70B's states sharded 8 ways only (141 GiB); eight stages divide
    them further, four still leave too much with each stage gathered during the step."""
    with pytest.raises(ConfigError) as caught:
        plan_for("experiment=llama3-70b-p5x16", "parallelism.strategy=fsdp_hybrid")
    assert "parallelism.pp=8 parallelism.dp=-1" in caught.value.fix
    assert "parallelism.pp=4" not in caught.value.fix


def test_pipeline_plans_are_the_same_however_spelled():
    """Resolved values land in the plan, so the default split and micro batches hash like explicit ones."""
    default = plan_for(*LLAMA_70B_PP4)
    spelled = plan_for(
        *LLAMA_70B_PP4[:2],
        "parallelism.dp=4",
        "parallelism.pp_microbatches=64",
        "parallelism.pp_layers_per_stage=[20,20,20,20]",
    )
    assert spelled.content_hash == default.content_hash
