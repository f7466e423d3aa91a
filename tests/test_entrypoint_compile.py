"""torch.compile in the built-in trainer: real torchrun processes on CPU with gloo, through the entrypoint.

Compiled and eager runs of the same plan give the same losses (DDP with compiled blocks, FSDP2 with full
activation checkpointing and the whole model compiled); the first step, where inductor compiles, is timed
apart from the steady steps; the compile cache lies under the checkpoints folder, so a restarted job finds
its kernels there and does not compile from scratch.
"""

import pytest

from tests.entrypoint_support import losses, tiny_plan, train

pytestmark = pytest.mark.torchrun

COMPILE_TOLERANCE = 1e-4
"""fp32 on CPU, 4 steps: inductor fuses and reorders the float operations, so sums round differently.
Observed: within 1e-6 of eager for both cases. A wrong graph (a missed op, stale weights) is off by 1e-2."""
STEPS = ("trainer.steps=4", "trainer.checkpoint_interval=0")


def first_and_steady(records: list[dict]) -> tuple[float, float]:
    """The first step's seconds (it compiles) and the slowest later step's."""
    return records[0]["step_s"], max(record["step_s"] for record in records[1:])


@pytest.mark.parametrize(
    ("overrides", "scope"),
    [
        (("parallelism=ddp",), "blocks"),
        (("parallelism=fsdp", "parallelism.activation_checkpointing=full"), "model"),
    ],
    ids=["ddp-blocks", "fsdp-full-checkpointing-model"],
)
def test_compiled_and_eager_losses_agree(tmp_path, overrides, scope):
    eager = train(tiny_plan(*overrides, *STEPS), tmp_path / "eager")
    compiled = train(tiny_plan(*overrides, *STEPS, f"trainer.compile={scope}"), tmp_path / "compiled")
    assert [r["step"] for r in compiled] == [1, 2, 3, 4]
    for step, loss in losses(eager).items():
        assert losses(compiled)[step] == pytest.approx(loss, abs=COMPILE_TOLERANCE), step
    first, steady = first_and_steady(compiled)
    assert first > 10 * steady, compiled  # compiling takes seconds, a tiny step milliseconds
    assert any((tmp_path / "compiled/checkpoints/compile-cache/inductor").rglob("*.py"))
    assert not (tmp_path / "eager/checkpoints/compile-cache").exists()


def test_a_restarted_job_compiles_from_the_warm_cache(tmp_path):
    plan = tiny_plan("parallelism=ddp", *STEPS, "trainer.compile=blocks")
    cold = train(plan, tmp_path)
    (tmp_path / "output/data/metrics.jsonl").unlink()
    warm = train(plan, tmp_path)  # the same checkpoints folder, as a restarted job gets it back
    assert losses(warm) == losses(cold)
    cold_compile, warm_compile = cold[0]["step_s"] - cold[1]["step_s"], warm[0]["step_s"] - warm[1]["step_s"]
    assert warm_compile < cold_compile / 2, (cold_compile, warm_compile)
