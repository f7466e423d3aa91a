"""The Plan: derived numbers, golden plan.json per preset, a hash that is stable and content-only."""

import dataclasses
import json

import pytest

from compiler.spec import SCHEMA_VERSION, Plan
from compiler.spec.errors import ConfigError
from tests.helpers import PRESETS, plan_for


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_plan_matches_golden(preset, golden):
    golden.check(f"plan/{preset}.json", plan_for(f"experiment={preset}").to_json(indent=2) + "\n")


@pytest.mark.parametrize(
    ("preset", "world", "dp", "tp", "accum", "tokens_per_step"),
    [
        ("smoke", 4, 4, 1, 1, 16 * 256),
        ("gpt2-124m-p4d", 8, 8, 1, 5, 480 * 1024),
        ("llama3-8b-p5x4", 32, 32, 1, 4, 128 * 8192),
        ("llama3-70b-p5x16", 128, 16, 8, 16, 256 * 8192),
    ],
)
def test_preset_derived_numbers(preset, world, dp, tp, accum, tokens_per_step):
    plan = plan_for(f"experiment={preset}")
    assert plan.layout.world_size == world == plan.layout.nodes * plan.layout.processes_per_node
    assert (plan.layout.dp, plan.layout.tp, plan.layout.pp) == (dp, tp, 1)
    assert plan.batch.grad_accum == accum
    assert plan.batch.tokens_per_step == tokens_per_step
    assert plan.batch.global_batch == plan.batch.micro_batch * accum * dp


def test_hybrid_shard_group_defaults_to_one_node():
    plan = plan_for("experiment=llama3-8b-p5x4")
    assert plan.layout.shard_degree == 8
    assert plan.parallelism.shard_group_size == 8


def test_inferred_degree_gives_the_same_plan_as_the_explicit_one():
    inferred = plan_for(
        "hardware=p5.48xlarge", "image=cuda", "parallelism=fsdp", "parallelism.tp=2", "parallelism.dp=-1"
    )
    explicit = plan_for(
        "hardware=p5.48xlarge", "image=cuda", "parallelism=fsdp", "parallelism.tp=2", "parallelism.dp=8"
    )
    assert inferred.layout.dp == 8
    assert inferred.content_hash == explicit.content_hash


def test_hash_is_stable_and_changes_with_content():
    first, second = plan_for("experiment=smoke"), plan_for("experiment=smoke")
    assert first.content_hash == second.content_hash
    assert len(first.content_hash) == 64
    assert plan_for("experiment=smoke", "trainer.lr=0.001").content_hash != first.content_hash


def test_hash_does_not_depend_on_key_order():
    plan = plan_for("experiment=smoke")
    shuffled = json.dumps(dict(reversed(list(plan.to_dict().items()))))
    assert Plan.from_json(shuffled).content_hash == plan.content_hash


@pytest.mark.parametrize("preset", PRESETS)
def test_json_round_trip_restores_the_same_plan(preset):
    plan = plan_for(f"experiment={preset}")
    restored = Plan.from_json(plan.to_json())
    assert restored == plan
    assert restored.content_hash == plan.content_hash
    assert type(restored.target) is type(plan.target)


def test_plan_is_frozen():
    plan = plan_for("experiment=smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.name = "other"  # type: ignore[misc]


def test_unknown_schema_version_is_refused():
    data = plan_for("experiment=smoke").to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1} is not {SCHEMA_VERSION}"):
        Plan.from_dict(data)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda d: d["model"].pop("layers"), "model.layers"),
        (lambda d: d["trainer"].update(nope=1), "trainer.nope"),
        (lambda d: d.update(layout=[1, 2]), "layout"),
        (lambda d: d["target"].update(kind="mainframe"), "target.kind"),
        (lambda d: d["parallelism"].update(strategy="zero9"), "parallelism.strategy"),
    ],
)
def test_a_plan_that_does_not_fit_the_schema_names_the_field(change, key):
    data = plan_for("experiment=smoke").to_dict()
    change(data)
    with pytest.raises(ConfigError) as error:
        Plan.from_dict(data)
    assert error.value.key == key and f"plan schema {SCHEMA_VERSION}" in error.value.message


def test_plan_identity_leaves_out_the_predictions():
    """Re-tuning the estimator or rewording a warning must not rename the plan (and its checkpoints)."""
    plan = plan_for("experiment=llama3-8b-p5x4")
    retuned = dataclasses.replace(
        plan,
        estimate=dataclasses.replace(plan.estimate, gpu_memory=1),
        warnings=("reworded",),
    )
    assert retuned.content_hash == plan.content_hash
    changed = dataclasses.replace(plan, trainer=dataclasses.replace(plan.trainer, steps=plan.trainer.steps + 1))
    assert changed.content_hash != plan.content_hash


@pytest.mark.parametrize(
    ("model", "parameters"),
    [
        ("gpt2-124m", 124_439_808),
        ("gpt2-350m", 354_823_168),
        ("gpt2-1.5b", 1_557_611_200),
        ("llama3.2-1b", 1_235_814_400),
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
    ],
)
def test_parameter_count_matches_published_models(model, parameters):
    """Planned on this machine's CPUs, which hold none of the larger ones (`hardware.memory_check=false`)."""
    assert plan_for(f"model={model}", "hardware.memory_check=false").parameters == parameters


def test_tiny_model_is_about_one_million_parameters():
    assert 0.9e6 < plan_for("model=tiny").parameters < 1.2e6


def test_cost_uses_catalog_price_unless_overridden():
    plan = plan_for("experiment=llama3-8b-p5x4")
    assert plan.price_per_hour == pytest.approx(4 * plan.instance.price_per_hour)
    assert plan_for("experiment=llama3-8b-p5x4", "hardware.price_per_hour=40").price_per_hour == 160


def test_mixed_precision_auto_is_bf16_on_gpus_and_fp32_on_cpus():
    assert plan_for("experiment=smoke").parallelism.mixed_precision.value == "fp32"
    assert plan_for("experiment=gpt2-124m-p4d").parallelism.mixed_precision.value == "bf16"
