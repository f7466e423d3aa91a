"""Context parallelism (`parallelism.cp`, all-to-all over heads): the plan's checks and batch arithmetic, the
load-balanced split, the exactness of the split model against the whole one on two gloo ranks (plain and packed
windows, values and gradients), and two torchrun runs, cp=2 against cp=1, that train to the same losses."""

import json

import pytest
import torch

from compiler.planner.context_rules import PRETRAINED
from compiler.spec.errors import ConfigError
from entrypoint.trainer.context_parallel import balanced_indices
from tests.entrypoint_support import LLAMA_STYLE, losses, run_on_two_ranks, tiny_plan, train, write_plan
from tests.helpers import plan_for

CP_TOLERANCE = 2e-5
"""cp=2 against cp=1: the same arithmetic in another order (attention's sums over the gathered sequence, the
all-reduced log-probabilities, the gradients' reductions over two ranks instead of one), so float32 rounding
differs by a few ulps per step; a wrong split, position or mask moves a loss by 1e-2 or more."""


def test_each_rank_holds_an_early_and_a_late_chunk_and_together_they_cover_the_sequence():
    assert balanced_indices(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert balanced_indices(8, 2, 1).tolist() == [2, 3, 4, 5]
    every = torch.cat([balanced_indices(24, 3, rank) for rank in range(3)])
    assert sorted(every.tolist()) == list(range(24))


def test_the_global_batch_counts_replicas_not_the_ranks_of_a_context_parallel_group():
    plan = plan_for(
        "experiment=smoke",
        "hardware.nodes=1",
        "hardware.processes_per_node=4",
        "parallelism=fsdp",
        "parallelism.cp=2",
        "parallelism.micro_batch=2",
        "parallelism.grad_accum=3",
        "parallelism.global_batch=-1",
        "model.seq_len=64",
    )
    assert (plan.layout.dp, plan.layout.cp, plan.layout.data_replicas) == (4, 2, 2)
    assert plan.batch.global_batch == 2 * 3 * 4 // 2


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["model.seq_len=66"], "model.seq_len", "2 × cp = 4 equal chunks"),
        (["model.heads=2", "model.kv_heads=1", "model.hidden=64"], "model.kv_heads", "1 kv_heads do not divide"),
        (["parallelism.cp_method=ring"], "parallelism.cp_method", "this hardware has no GPU"),
        (["parallelism=zero3"], "parallelism.cp", "not zero3"),
        (["trainer.loss_chunk=0"], "trainer.loss_chunk", "does not split over cp ranks"),
        (["parallelism.cp=3"], "parallelism.cp", "does not divide the dp ranks"),
    ],
)
def test_context_parallel_mistakes_name_their_key(overrides, key, message):
    with pytest.raises(ConfigError) as error:
        plan_for(
            "experiment=smoke",
            "hardware.nodes=1",
            "hardware.processes_per_node=2",
            "parallelism=fsdp",
            "parallelism.cp=2",
            "model.seq_len=64",
            *overrides,
        )
    assert error.value.key == key, error.value.one_line()
    assert message in error.value.one_line()


def test_model_hf_splits_sequences_of_the_architectures_tested_split_and_refuses_others(hf_checkpoints):
    common = ("experiment=smoke", "hardware.nodes=1", "hardware.processes_per_node=2", "parallelism=fsdp")
    common += ("parallelism.cp=2", "model.seq_len=64", "model=hf")
    assert plan_for(*common, f"model.path={hf_checkpoints['qwen3']}").layout.cp == 2
    with pytest.raises(ConfigError) as error:
        plan_for(*common, f"model.path={hf_checkpoints['gemma']}")
    assert error.value.key == "parallelism.cp"
    assert "splits sequences for llama, mistral, qwen2, qwen3, phi3, gpt2, not gemma" in error.value.one_line()


EXACTNESS = """
import json
import sys
import torch
import torch.distributed as dist
from pathlib import Path
from compiler.spec import Plan
from entrypoint.trainer.context_parallel import context_groups
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.loss import IGNORE_INDEX
from entrypoint.trainer.models.packed import packed
from entrypoint.trainer.objective import logits


def check(plan, label):
    spec, config = MODELS[plan.model.family], plan.model
    torch.manual_seed(0)
    whole = spec.build(config)
    split = spec.build(config)
    split.load_state_dict(whole.state_dict())
    spec.set_context_parallel(split, context_groups(2, 2))
    seq = config.seq_len
    tokens = torch.randint(config.vocab, (2, seq + 1), generator=torch.Generator().manual_seed(1))
    positions = torch.cat([torch.arange(20), torch.arange(seq - 20)]).expand(2, -1)  # two documents per window
    targets = tokens[:, 1:].clone()
    targets[:, :5] = IGNORE_INDEX
    whole_logps = lambda inputs: logits(whole(inputs, targets=targets, loss_chunk=16))
    split_logps = lambda inputs: logits(split(inputs, targets=targets, loss_chunk=16))
    for name, inputs in (("plain", tokens[:, :-1]), ("packed", packed(tokens[:, :-1], positions))):
        expected = whole_logps(inputs)
        got = split_logps(inputs)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        expected.sum().backward()
        got.sum().backward()
        for (key, a), b in zip(whole.named_parameters(), split.parameters()):
            # the all-reduce's backward hands each rank cp x its tokens' gradient: the two ranks' halves sum to 2x
            summed = b.grad.clone()
            dist.all_reduce(summed)
            torch.testing.assert_close(summed, 2 * a.grad, rtol=1e-4, atol=1e-6, msg=key)
            a.grad, b.grad = None, None
        print(f"{label} {name}-exact")
    # the second document's log-probabilities do not see the first document's tokens
    changed = tokens[:, :-1].clone()
    changed[:, :20] = (changed[:, :20] + 1) % config.vocab
    before = split_logps(packed(tokens[:, :-1], positions))
    after = split_logps(packed(changed, positions))
    torch.testing.assert_close(after[:, 20:], before[:, 20:], rtol=0, atol=1e-6)
    assert not torch.allclose(after[:, :20], before[:, :20])
    print(f"{label} documents-apart")


dist.init_process_group("gloo")
for label, path in json.loads(Path(sys.argv[1]).with_name("models.json").read_text()).items():
    check(Plan.from_json(Path(path).read_text()), label)
"""


SHAPES = {"gpt2": (), "llama": LLAMA_STYLE}
"""The built-in decoder's shapes."""


@pytest.mark.torchrun
def test_the_split_model_computes_what_the_whole_model_computes(tmp_path, hf_checkpoints):
    """The built-in decoder's shapes and every `model=hf` architecture cp accepts, one after the other in one
    torchrun launch: values and gradients, plain and packed windows, documents kept apart."""
    models = {f"decoder-{shape}": ("model.layers=2", *overrides) for shape, overrides in SHAPES.items()}
    models |= {f"hf-{arch}": ("model=hf", f"model.path={hf_checkpoints[arch]}") for arch in PRETRAINED}
    paths = {
        label: str(write_plan(tiny_plan("parallelism=fsdp", "parallelism.cp=2", *model), tmp_path / label))
        for label, model in models.items()
    }
    (tmp_path / "models.json").write_text(json.dumps(paths))
    output = run_on_two_ranks(EXACTNESS, tiny_plan("parallelism=fsdp", "parallelism.cp=2"), tmp_path)
    for label in models:
        for claim in ("plain-exact", "packed-exact", "documents-apart"):
            assert output.count(f"{label} {claim}") == 2, (label, claim)


@pytest.mark.torchrun
def test_cp2_trains_to_the_losses_of_cp1_at_seq_len_1024(tmp_path):
    common = (
        "parallelism=fsdp",
        "model.seq_len=1024",
        "model.context=1024",
        "model.layers=2",
        "trainer.steps=2",
        "trainer.checkpoint_interval=0",
        "parallelism.micro_batch=1",
        "parallelism.grad_accum=2",
        "parallelism.global_batch=-1",
        *LLAMA_STYLE,
    )
    whole = train(tiny_plan(*common, "hardware.processes_per_node=1"), tmp_path / "cp1")
    split = train(tiny_plan(*common, "parallelism.cp=2"), tmp_path / "cp2")
    assert len(losses(whole)) == 2
    assert losses(split) == pytest.approx(losses(whole), abs=CP_TOLERANCE)


LONG = ("experiment=llama3-8b-p5x4", "model.context=131072", "hardware.nodes=1")


def test_llama3_8b_at_128k_fits_one_p5_node_with_cp8_and_its_refusal_without_cp_names_cp():
    plan = plan_for(*LONG, "model.seq_len=131072", "parallelism.cp=8")
    assert plan.estimate.memory.total < 0.5 * plan.estimate.gpu_memory
    with pytest.raises(ConfigError) as error:
        plan_for(*LONG, "model.seq_len=131072")
    assert "parallelism.cp=2 (" in error.value.one_line()


def test_at_32k_the_streamed_logits_stay_under_2_gib_where_the_whole_ones_take_tens():
    streamed = plan_for(*LONG, "model.seq_len=32768")
    whole = plan_for(*LONG, "model.seq_len=32768", "trainer.loss_chunk=0", "hardware.memory_check=false")
    assert streamed.estimate.memory.logits < 2 * 2**30  # one chunk's: below the layers' moment, so not the peak
    assert whole.estimate.memory.logits > 40 * 2**30
    assert whole.estimate.memory.total - streamed.estimate.memory.total > 30 * 2**30


def test_a_hugging_face_llama_at_128k_that_does_not_fit_is_offered_cp(tmp_path):
    """The fit search offers cp for the `model=hf` architectures whose attention splits, as for the built-in
    decoder: a config.json of Llama 3.1 8B's shape, made here with transformers, planned at 128K tokens."""
    from transformers import LlamaConfig

    shape = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32)
    LlamaConfig(**shape, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072).save_pretrained(
        tmp_path
    )
    hf = ("experiment=llama3-8b-p5x4", "hardware.nodes=1", "model=hf", f"model.path={tmp_path}")
    with pytest.raises(ConfigError) as error:
        plan_for(*hf, "model.seq_len=131072")
    assert "parallelism.cp=2 (" in error.value.one_line()
    assert plan_for(*hf, "model.seq_len=131072", "parallelism.cp=8").layout.cp == 8
