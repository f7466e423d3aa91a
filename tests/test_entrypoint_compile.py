"""torch.compile in the built-in trainer: real torchrun processes on CPU with gloo, through the entrypoint.

Compiled and eager runs of the same plan give the same losses (DDP with compiled blocks, FSDP2 with full
activation checkpointing and the whole model compiled); the first step, where inductor compiles, is timed
apart from the steady steps; the compile cache lies under the checkpoints folder, so a restarted job finds
its kernels there and does not compile from scratch.
"""

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compiler.spec import Plan
from tests.entrypoint_support import INDUCTOR_ISA_FROM_CPUINFO, RERUN_TOLERANCE, losses, metrics, tiny_plan, train

pytestmark = pytest.mark.torchrun

COMPILE_TOLERANCE = 1e-4
"""fp32 on CPU, 4 steps: inductor fuses and reorders the float operations, so sums round differently.
Observed: within 1e-6 of eager for both cases. A wrong graph (a missed op, stale weights) is off by 1e-2."""
STEPS = ("trainer.steps=4", "trainer.checkpoint_interval=0", "hardware.processes_per_node=1")
"""One rank: every claim here is about one process's compile and cache (DDP and FSDP2 still wrap the model and
reduce over gloo at one rank), and each rank compiles the same graphs, so a second rank doubles the CPU time."""
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
"""The threads the entrypoint gives each of two ranks on two CPUs (entrypoint.launcher.threads), not the two of a lone
one: two threads on a tiny step's small ops wait on each other on loaded cores (seen: steady steps of 2-4 s at a
load of 14 on 2 cores, too close to the compiling step's 22 s), and the steps here are timed."""


def first_and_steady(records: list[dict]) -> tuple[float, float]:
    """The first step's seconds (it compiles) and the slowest later step's."""
    return records[0]["step_s"], max(record["step_s"] for record in records[1:])


CASES = {
    "ddp-blocks": (("parallelism=ddp",), "blocks"),
    "fsdp-full-checkpointing-model": (("parallelism=fsdp", "parallelism.activation_checkpointing=full"), "model"),
}


def compiled_plan(case: str) -> Plan:
    overrides, scope = CASES[case]
    return tiny_plan(*overrides, *STEPS, f"trainer.compile={scope}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Callable[[str], Path]:
    """Each case's compiled run, trained once in this module: compared with eager, and restarted on its cache."""

    @functools.cache
    def run(case: str) -> Path:
        root = tmp_path_factory.mktemp(case)
        train(compiled_plan(case), root, **INDUCTOR_ISA_FROM_CPUINFO, **ONE_THREAD)
        return root

    return run


@pytest.mark.parametrize("case", CASES)
def test_compiled_and_eager_losses_agree(tmp_path, compiled, case):
    overrides, _ = CASES[case]
    eager = train(tiny_plan(*overrides, *STEPS), tmp_path / "eager", **ONE_THREAD)
    folder = compiled(case)
    records = metrics(folder)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for step, loss in losses(eager).items():
        assert losses(records)[step] == pytest.approx(loss, abs=COMPILE_TOLERANCE), step
    first, steady = first_and_steady(records)
    assert first > 10 * steady, records  # compiling takes seconds, a tiny step milliseconds
    assert any((folder / "checkpoints/compile-cache/inductor").rglob("*.py"))
    assert not (tmp_path / "eager/checkpoints/compile-cache").exists()


def test_a_restarted_job_compiles_from_the_warm_cache(tmp_path, compiled):
    shutil.copytree(compiled("ddp-blocks"), tmp_path, dirs_exist_ok=True)
    cold = metrics(tmp_path)
    (tmp_path / "output/data/metrics.jsonl").unlink()
    # the same checkpoints folder, as a restarted job gets it back
    warm = train(compiled_plan("ddp-blocks"), tmp_path, **INDUCTOR_ISA_FROM_CPUINFO, **ONE_THREAD)
    assert losses(warm) == pytest.approx(losses(cold), abs=RERUN_TOLERANCE)
    cold_compile, warm_compile = cold[0]["step_s"] - cold[1]["step_s"], warm[0]["step_s"] - warm[1]["step_s"]
    assert warm_compile < cold_compile / 2, (cold_compile, warm_compile)
