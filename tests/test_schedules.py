"""The optimizer and the learning-rate schedules against transformers' own: every schedule name's curve point by
point against `get_scheduler` (as the Trainer steps it), and AdamW's steps against the Trainer's optimizer."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.optimization import get_scheduler

from compiler.config.compose import compose_config
from compiler.planner.schedule_rules import differences_from_trainer
from compiler.planner.summary import summary_lines
from compiler.spec import schema
from entrypoint.trainer.optim import adamw, lr_at
from tests.entrypoint_support import tiny_plan

STEPS, WARMUP_RATIO, PEAK = 40, 0.13, 3e-3

SCHEDULES = {
    "linear": ((), {}),
    "cosine": ((), {}),
    "cosine_with_min_lr": (("trainer.min_lr_ratio=0.1",), {"min_lr_rate": 0.1}),
    "constant": (("trainer.warmup_ratio=0",), {}),
    "constant_with_warmup": ((), {}),
    "wsd": (("trainer.min_lr_ratio=0.05", "trainer.decay_steps=11"), {"num_decay_steps": 11, "min_lr_ratio": 0.05}),
}
"""Each dockyard schedule name: its overrides, and the keyword arguments the Trainer passes transformers'
scheduler for it (`lr_scheduler_kwargs`)."""

TRANSFORMERS_NAME = {"wsd": "warmup_stable_decay"}
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def test_every_transformers_schedule_name_is_tested():
    names = {schedule.value for schedule in schema.LrSchedule} - {"cosine_to_min"}
    assert names == set(SCHEDULES)


@pytest.mark.parametrize("name", SCHEDULES)
def test_lr_curve_equals_transformers_scheduler(name, tmp_path):
    overrides, kwargs = SCHEDULES[name]
    plan = tiny_plan(
        f"trainer.lr_schedule={name}",
        f"trainer.steps={STEPS}",
        f"trainer.lr={PEAK}",
        "trainer.warmup_steps=0",
        f"trainer.warmup_ratio={WARMUP_RATIO}",
        *overrides,
    )
    args = TrainingArguments(output_dir=str(tmp_path), warmup_steps=WARMUP_RATIO if plan.trainer.warmup_ratio else 0)
    warmup = args.get_warmup_steps(STEPS)
    assert plan.derived.warmup_steps == warmup
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    scheduler = get_scheduler(
        TRANSFORMERS_NAME.get(name, name),
        optimizer,
        num_warmup_steps=warmup,
        num_training_steps=STEPS,
        scheduler_specific_kwargs=kwargs,
    )
    theirs = []
    for _ in range(STEPS):  # the Trainer's order: the optimizer steps at the current lr, then the scheduler
        theirs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    ours = [lr_at(step, plan.trainer, plan.derived) for step in range(STEPS)]
    assert ours == theirs
    assert (len(set(theirs)) == 1) == (name == "constant")  # the others move, so a wrong shape would show


def test_adamw_steps_equal_the_trainers(tmp_path):
    """Three AdamW steps (one step's update is lr × sign(grad) whatever the betas) with betas, eps and weight
    decay unlike either tool's default, on the same GPT-2 and gradients: the same weights."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, **NO_DROPOUT))
    ours_model = copy.deepcopy(model)
    hyper = {"learning_rate": 1e-2, "weight_decay": 0.3, "adam_beta1": 0.7, "adam_beta2": 0.9, "adam_epsilon": 1e-3}
    args = TrainingArguments(output_dir=str(tmp_path), optim="adamw_torch", report_to="none", use_cpu=True, **hyper)
    theirs = Trainer(model=model, args=args).create_optimizer()
    plan = tiny_plan(
        *(f"trainer.{key}={value}" for key, value in hyper.items() if key != "learning_rate"), "trainer.lr=1e-2"
    )
    ours = adamw(ours_model, plan.trainer)
    tokens = torch.randint(0, 64, (3, 2, 16), generator=torch.Generator().manual_seed(1))
    for batch in tokens:
        for net, optimizer in ((model, theirs), (ours_model, ours)):
            optimizer.zero_grad()
            net(batch, labels=batch).loss.backward()
            optimizer.step()
    for (name, theirs_param), ours_param in zip(model.named_parameters(), ours_model.parameters(), strict=True):
        torch.testing.assert_close(ours_param, theirs_param, msg=name)


def test_a_warmup_as_long_as_the_run_is_planned_with_a_warning():
    """The Trainer accepts it, so dockyard does, and says what it means."""
    plan = tiny_plan("trainer.warmup_steps=6")
    assert "the warm-up lasts the whole run (6 of 6 steps): the lr never reaches trainer.lr" in plan.warnings


def test_epochs_make_the_steps_from_the_token_count_and_the_warmup_ratio_follows():
    plan = tiny_plan("trainer.epochs=2.5", "data.tokens=10000", "trainer.warmup_steps=0", "trainer.warmup_ratio=0.1")
    assert plan.batch.tokens_per_step == 512
    assert plan.trainer.steps == 49  # ceil(2.5 × 10,000 / 512)
    assert plan.derived.warmup_steps == 5  # ceil(0.1 × 49)
    assert "AdamW, 5 warm-up steps, 49 steps from trainer.epochs=2.5; unlike the HF Trainer's" in "\n".join(
        summary_lines(plan)
    )


def test_the_finetune_preset_is_the_trainers_defaults(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path))
    trainer = compose_config(["~experiment", "trainer=finetune"]).trainer
    theirs = (args.learning_rate, args.lr_scheduler_type.value, args.weight_decay, args.max_grad_norm)
    assert (trainer.lr, trainer.lr_schedule.value, trainer.weight_decay, trainer.grad_clip) == theirs
    assert (trainer.adam_beta1, trainer.adam_beta2, trainer.adam_epsilon) == (
        args.adam_beta1,
        args.adam_beta2,
        args.adam_epsilon,
    )
    assert differences_from_trainer(trainer) == []
    assert differences_from_trainer(tiny_plan().trainer) == [
        "lr_schedule cosine_to_min (linear)",
        "weight_decay 0.1 (0)",
        "adam_beta2 0.95 (0.999)",
        "min_lr_ratio 0.1 (0)",
    ]
