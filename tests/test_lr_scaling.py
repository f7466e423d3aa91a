"""The learning rate follows the global batch: `trainer.lr` was tuned at `trainer.base_batch` sequences."""

import math

import pytest

from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from tests.helpers import plan_for

SMOKE = ["experiment=smoke", "trainer.lr=0.001"]  # 2 nodes × 2 processes: global batch = 4 × micro batch


@pytest.mark.parametrize(
    ("scaling", "micro_batch", "expected"),
    [
        ("none", 8, 0.001),
        ("linear", 4, 0.001),  # the batch it was tuned at: unchanged
        ("linear", 8, 0.002),
        ("linear", 2, 0.0005),
        ("sqrt", 8, 0.001 * math.sqrt(2)),
        ("sqrt", 16, 0.002),
    ],
)
def test_the_peak_lr_is_scaled_exactly(scaling, micro_batch, expected):
    plan = plan_for(
        *SMOKE, f"trainer.lr_scaling={scaling}", "trainer.base_batch=16", f"parallelism.micro_batch={micro_batch}"
    )
    assert plan.batch.global_batch == 4 * micro_batch
    assert plan.derived.lr == expected
    assert plan.trainer.lr == 0.001  # the recipe's value stays in the plan as given


def test_the_summary_says_the_scaled_lr():
    plan = plan_for(*SMOKE, "trainer.lr_scaling=linear", "trainer.base_batch=16", "parallelism.micro_batch=8")
    assert "lr        0.002 (linear from 0.001 at 16 to 32 sequences)" in summary_lines(plan)


def test_scaling_needs_the_batch_the_lr_was_tuned_at():
    with pytest.raises(ConfigError, match="trainer.base_batch: is needed by trainer.lr_scaling=linear"):
        plan_for(*SMOKE, "trainer.lr_scaling=linear")
