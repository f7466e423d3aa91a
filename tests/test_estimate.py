"""The planner: model-state bytes against the ZeRO paper, fit errors whose fixes really fit, auto micro batch."""

import re

import pytest

from compiler.planner import estimate, fit, speed
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Checkpointing, ParallelismConfig, Precision, Strategy
from tests.helpers import plan_for

GIB = estimate.GIB


@pytest.mark.parametrize(
    ("strategy", "gigabytes"),
    [(Strategy.ddp, 120), (Strategy.zero1, 31.4), (Strategy.zero2, 16.6), (Strategy.zero3, 1.9)],
)
def test_zero_paper_worked_example(strategy, gigabytes):
    """Rajbhandari et al. 2020, Figure 1: 7.5B parameters on 64 GPUs, mixed precision with Adam (K = 12)."""
    par = ParallelismConfig(strategy=strategy, mixed_precision=Precision.fp16)
    per_parameter = sum(estimate.state_bytes_per_parameter(par, shard=64 if strategy is not Strategy.ddp else 1))
    assert round(per_parameter * 7.5e9 / 1e9, 1) == gigabytes


def test_fsdp_divides_all_model_state_by_its_shard_group():
    full = estimate.state_bytes_per_parameter(ParallelismConfig(strategy=Strategy.fsdp), shard=32)
    hybrid = estimate.state_bytes_per_parameter(ParallelismConfig(strategy=Strategy.fsdp_hybrid), shard=8)
    assert sum(full) == pytest.approx(16 / 32)
    assert sum(hybrid) == pytest.approx(16 / 8)


def test_more_recomputation_keeps_fewer_activations():
    sizes = [
        plan_for(
            "experiment=llama3-8b-p5x4",
            f"parallelism.activation_checkpointing={level.value}",
            "hardware.memory_check=false",
        ).estimate.memory.activations
        for level in Checkpointing
    ]
    assert sizes[0] > sizes[1] > sizes[2]


def test_tensor_parallelism_divides_what_lies_between_its_split_projections():
    """FSDP + TP splits heads and MLP units, the residual stream by sequence and the untied head and its logits
    by vocabulary (sequence and loss parallelism): what stays whole on every rank of the group is the
    embeddings, the norms' weights and the column-split projections' gathered inputs."""
    # the whole logits (trainer.loss_chunk=0): with the streamed loss one chunk's logits are smaller than the
    # layers' backward at tp=1, so the peak would not show them there
    none = ["parallelism.activation_checkpointing=none", "trainer.loss_chunk=0", "hardware.memory_check=false"]
    one = plan_for("experiment=llama3-70b-p5x16", "parallelism.tp=1", *none)
    eight = plan_for("experiment=llama3-70b-p5x16", *none)
    assert one.estimate.memory.activations / 8 < eight.estimate.memory.activations < one.estimate.memory.activations
    assert eight.estimate.memory.logits == pytest.approx(one.estimate.memory.logits / 8, abs=1)
    model = eight.model
    embeddings = head = model.vocab * model.hidden
    assert estimate.parameters_per_gpu(model, 8, vocab=8) == pytest.approx(
        embeddings + (eight.parameters - embeddings) / 8, rel=1e-3
    )
    # FSDP shards what a tensor-parallel rank holds over its 16 data-parallel peers: 8 bytes of Adam moments
    held = estimate.parameters_per_gpu(model, 8, vocab=8)
    assert eight.estimate.memory.optimizer == pytest.approx(8 * held / 16, abs=1)
    assert estimate.parameters_per_gpu(model, 8) == pytest.approx(held + head * 7 / 8)


def test_sequence_parallelism_splits_the_residual_stream_but_not_the_gathered_inputs():
    """Per token of a layer: under full recomputation all that is kept is the block's input, split by sequence;
    without recomputation the norms' inputs are split too, while the column-split projections' inputs, gathered
    whole, are not. A pipeline's stages split no sequence and keep the head and the logits whole."""
    model = plan_for("experiment=llama3-70b-p5x16").model
    full = ParallelismConfig(strategy=Strategy.fsdp, activation_checkpointing=Checkpointing.full)
    split = estimate.activation_bytes_per_token(model, full, tp=8, sequence=8)["layer"]
    assert split == estimate.activation_bytes_per_token(model, full, tp=1)["layer"] / 8
    none = ParallelismConfig(strategy=Strategy.fsdp, activation_checkpointing=Checkpointing.none)
    megatron = estimate.activation_bytes_per_token(model, none, tp=8)["layer"]
    sequence = estimate.activation_bytes_per_token(model, none, tp=8, sequence=8)["layer"]
    assert megatron - sequence == 2 * model.hidden * 2 * 7 / 8  # the two norms' bf16 inputs, 7/8 of them gone
    # the op-level policy also keeps the two reduce-scatters' outputs, an eighth of the residual stream each
    selective = ParallelismConfig(strategy=Strategy.fsdp, activation_checkpointing=Checkpointing.selective)
    kept = estimate.activation_bytes_per_token(model, selective, tp=8, sequence=8)["layer"]
    in_a_pipeline = estimate.activation_bytes_per_token(model, selective, tp=8)["layer"]
    block_input = model.hidden * 2
    assert kept - (in_a_pipeline - block_input + block_input / 8) == 2 * model.hidden * 2 / 8
    piped = plan_for("experiment=llama3-70b-p5x16", "parallelism.pp=2", "hardware.memory_check=false").layout
    assert (estimate.sequence_shards(piped), estimate.vocab_shards(model, piped)) == (1, 1)
    tied = plan_for("experiment=gpt2-124m-p4d").model
    assert estimate.vocab_shards(tied, plan_for("experiment=llama3-70b-p5x16").layout) == 1


@pytest.mark.parametrize(
    "row",
    [("llama3-8b", "128", "2", "False"), ("llama3-70b", "256", "16", "True")],
    ids=["llama3-8b-16-p5-nodes-selective", "llama3-70b-fsdp32-tp8-mb16"],
)
def test_the_fields_layouts_fit_as_published(row):
    """The issue's rows (model, GPUs, micro batch, compile) as torchtitan ran them (bench/published/rows.csv, its
    whole logits) fit an 80 GB H100 of p5.48xlarge with the memory check on: Llama 3.1 8B on 16 nodes at micro
    batch 2 of 8K tokens with the op-level selective policy (measured 67.0 GiB), and 70B with FSDP 32 × TP 8 at
    micro batch 16 (71.9 GiB)."""
    from bench import planner_published

    (published,) = [
        r
        for r in planner_published.read_rows()
        if (r.fields["model"], r.fields["gpus"], r.fields["micro_batch"], r.fields["compile"]) == row
        and r.fields["memory_gib"]  # the runs whose memory was published
    ]
    plan = plan_for(*published.overrides(), "hardware.memory_check=true")
    assert plan.estimate.memory.total < plan.instance.gpu_memory_gib * GIB
    assert plan.estimate.memory.total / GIB == pytest.approx(float(published.fields["memory_gib"]), rel=0.2)


def test_sequence_parallelism_needs_sequences_that_divide_by_tp():
    with pytest.raises(ConfigError, match="do not divide by 8") as caught:
        plan_for("experiment=llama3-70b-p5x16", "model.seq_len=8188")
    assert caught.value.key == "model.seq_len" and "multiple of 8" in caught.value.fix


def test_flops_per_token_convention():
    model = plan_for("model=gpt2-124m").model
    matmul = 12 * estimate.layer_parameters(model) + 50257 * 768
    assert speed.flops_per_token(model) == 6 * matmul + 12 * 12 * 768 * 1024


def test_the_trainer_reports_mfu_by_the_planners_formula():
    """One FLOPs-per-token formula: at the predicted tokens/s the trainer's MFU is the predicted MFU."""
    from entrypoint.trainer.metrics.measure import mfu

    plan = plan_for("experiment=llama3-8b-p5x4", "data.token_dtype=uint32")
    predicted = plan.estimate.throughput
    assert plan.derived.flops_per_token == predicted.flops_per_token == speed.flops_per_token(plan.model)
    assert mfu(plan, predicted.tokens_per_second) == pytest.approx(predicted.mfu, rel=1e-12)


def test_plan_that_does_not_fit_names_largest_term_and_fixes_that_fit():
    # micro batch 2 without recomputation: 92 GiB of activations (micro batch 1 fits with the streamed loss)
    overrides = ["experiment=llama3-8b-p5x4", "parallelism.activation_checkpointing=none", "parallelism.micro_batch=2"]
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    error = caught.value
    assert error.key == "parallelism.activation_checkpointing"
    assert "exceeds the 79.6 GiB of H100-SXM5-80GB (largest: activations" in error.message
    fixes = re.findall(r"([\w.]+=[\w.]+) \(([\d.]+) GiB\)", error.fix)
    assert 1 <= len(fixes) <= 3
    for change, predicted in fixes:
        plan = plan_for(*overrides, change)
        assert plan.estimate.memory.total <= plan.estimate.gpu_memory
        assert plan.estimate.memory.total / GIB == pytest.approx(float(predicted), abs=0.05)


def test_fixes_keep_the_instance_count_before_adding_nodes():
    config_fixes = fit.cheapest_fixes(
        *_config_and_instance(
            "experiment=llama3-8b-p5x4", "parallelism.activation_checkpointing=none", "parallelism.micro_batch=2"
        ),
    )
    changes = [change for change, _ in config_fixes]
    node_changes = [i for i, change in enumerate(changes) if change.startswith("hardware.nodes")]
    assert all(i > j for i in node_changes for j, c in enumerate(changes) if not c.startswith("hardware.nodes"))


def test_memory_check_false_turns_the_error_into_a_warning():
    plan = plan_for(
        "experiment=llama3-8b-p5x4",
        "parallelism.activation_checkpointing=none",
        "parallelism.micro_batch=2",
        "hardware.memory_check=false",
    )
    assert plan.estimate.memory.total > plan.estimate.gpu_memory
    assert any("not enforced" in warning for warning in plan.warnings)


@pytest.mark.parametrize("preset", ["gpt2-124m-p4d", "llama3-8b-p5x4", "llama3-70b-p5x16"])
def test_auto_micro_batch_is_the_largest_that_fits(preset):
    plan = plan_for(f"experiment={preset}", "parallelism.micro_batch=auto")
    per_replica = plan.batch.global_batch // plan.layout.dp
    chosen = plan.batch.micro_batch
    assert plan.estimate.memory.total <= plan.estimate.gpu_memory
    larger = [m for m in range(chosen + 1, per_replica + 1) if per_replica % m == 0]
    if larger:
        with pytest.raises(ConfigError, match="exceeds"):
            plan_for(f"experiment={preset}", f"parallelism.micro_batch={larger[0]}")


def test_auto_micro_batch_needs_a_gpu():
    with pytest.raises(ConfigError, match="auto fits the micro batch to GPU memory") as caught:
        plan_for("parallelism.micro_batch=auto")
    assert caught.value.key == "parallelism.micro_batch"


def test_micro_batch_must_be_a_number_or_auto():
    with pytest.raises(ConfigError, match="'many' is not a number"):
        plan_for("parallelism.micro_batch=many")


def test_cpu_plans_carry_no_gpu_estimate():
    assert plan_for("experiment=smoke").estimate is None


def _config_and_instance(*overrides):
    from compiler.config.compose import compose_config
    from compiler.core.catalog import instance_type

    config = compose_config(overrides)
    return config, instance_type(config.hardware.instance_type)


def test_what_the_estimate_assumes_is_labelled_in_the_summary_and_the_report():
    from compiler.planner.assumptions import ASSUMPTIONS
    from compiler.planner.summary import report_markdown, summary_lines

    plan = plan_for("experiment=gpt2-124m-p4d")
    lines = {line.split()[0]: line for line in summary_lines(plan)}
    assert lines["memory"].endswith("(context, NCCL buffers and margin assumed)")
    assert "GiB per GPU (reserved peak)" in lines["memory"]
    efficiency = plan.estimate.throughput.matmul_efficiency
    assert f"(predicted at {efficiency:.0%} matmul efficiency: fitted to 38 published A100 runs" in lines["speed"]
    report = report_markdown(plan)
    assert "## Assumptions (not measured)" in report
    assert {a.name for a in ASSUMPTIONS} == {
        "CUDA context", "NCCL buffers", "allocator margin", "matmul efficiency", "attention recomputation",
        "selective recomputation",
    }  # fmt: skip
    for assumption in ASSUMPTIONS:
        assert f"| {assumption.name} | {assumption.value} | {assumption.source} |" in report


def test_a_scripts_plan_predicts_nothing_about_the_built_in_model():
    from compiler.planner.summary import predicted_seconds, report_markdown, summary_lines

    plan = plan_for("hardware=g5.xlarge", "trainer=script", "trainer.source_dir=src", "trainer.script=train.py",
                    "+trainer.hyperparameters.epochs=3")  # fmt: skip
    lines = summary_lines(plan)
    assert "script    train.py from src   hyperparameters epochs=3" in lines
    assert not [line for line in lines if line.split()[0] in ("model", "memory", "speed", "total", "batch")]
    assert "tokens/s" not in "\n".join(lines) and "per 1B tokens" not in "\n".join(lines)
    assert "## Speed" not in report_markdown(plan) and predicted_seconds(plan) is None


def test_the_memory_is_a_reserved_peak_that_counts_fsdps_gathered_root():
    """Item 5 of issue 60: the summary and the report name the prediction a reserved peak (what the caching
    allocator holds), and FSDP's root module (embeddings, head, final norm), gathered from the forward to its
    backward, is in the communication term beside the per-layer gathers."""
    from compiler.planner.summary import report_markdown, summary_lines

    plan = plan_for("model=llama3-8b", "hardware=p5.48xlarge", "parallelism=fsdp", "hardware.memory_check=false")
    model = plan.model
    root = 2 * model.vocab * model.hidden + model.hidden  # untied embedding and head, the final norm
    layer = estimate.layer_parameters(model)
    assert plan.estimate.memory.communication >= 2 * root + 2 * (2 * layer + 2 * layer)  # bf16 root, two layers
    assert "(reserved peak)" in next(line for line in summary_lines(plan) if line.startswith("memory"))
    assert "## Memory per GPU (predicted reserved peak" in report_markdown(plan)
