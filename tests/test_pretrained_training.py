"""`model=hf` under every engine that runs it, on two real torchrun ranks (gloo, CPU): the weights each
strategy loads from the checkpoint (whole under DDP and ZeRO-1, sharded under FSDP2 and FSDP+TP, one gathered
parameter at a time under ZeRO-3) give the loss transformers' own `from_pretrained` model gives on the same
batch, and the strategies' losses agree while they train, as the built-in model's do. LoRA trains only its
adapters and starts from the base model's loss."""

import shutil

import pytest
from transformers import AutoTokenizer

from tests.entrypoint_support import run_plans_on_two_ranks, tiny_plan, train
from tests.pretrained import save_checkpoint
from tests.text_corpus import conversations, write_jsonl

pytestmark = pytest.mark.torchrun

STRATEGIES = {
    "ddp": ("parallelism=ddp",),
    "fsdp": ("parallelism=fsdp",),
    "hybrid": ("parallelism=fsdp-hybrid", "parallelism.shard_group_size=1"),
    "fsdp-tp": ("parallelism=fsdp", "parallelism.tp=2"),
    "zero1": ("parallelism=zero1",),
    "zero3": ("parallelism=zero3",),
    "fsdp-lora": ("parallelism=fsdp", "model.lora.rank=4"),
}
"""Every strategy on qwen2 (biased q/k/v, grouped-query attention, untied head)."""
FAMILIES = {"llama": ("ddp", "fsdp", "zero3"), "gpt2": ("ddp", "fsdp", "zero3")}
"""Two more families (tied embeddings, GPT-2's Conv1D and learned positions) under the three kinds of
loading: whole, sharded, one gathered parameter at a time."""
LOADED_TOLERANCE = 1e-5
"""The loaded model's loss (eval mode) against transformers' own model on the same batch (fp32 on both sides;
the reduction order differs)."""
TRAINED_TOLERANCE = 5e-4
"""As the built-in model's engines (`test_engine_conformance.TOLERANCE`)."""

SCRIPT = """
import json, sys
from pathlib import Path
import torch, torch.distributed as dist
from transformers import AutoModelForCausalLM
from compiler.spec import Plan
from entrypoint.trainer import checkpoint
from entrypoint.trainer.data.batches import Batches, make_source
from entrypoint.trainer.engines import make_engine

PLANS = json.loads(Path(sys.argv[1]).with_name("plans.json").read_text())
cpu = torch.device("cpu")
dist.init_process_group("gloo")
rank = dist.get_rank()
reference_models = {}
for name, path in PLANS.items():
    plan = Plan.from_json(Path(path).read_text())
    batches = Batches(make_source(plan, None), plan, plan.layout.coordinates(rank).dp)
    if plan.model.path not in reference_models:
        reference_models[plan.model.path] = AutoModelForCausalLM.from_pretrained(plan.model.path, dtype=torch.float32)
    theirs = reference_models[plan.model.path]
    inputs, targets = batches.micro_batch(0, 0)
    with torch.no_grad():
        first = torch.nn.functional.cross_entropy(theirs(input_ids=inputs).logits.flatten(0, 1), targets.flatten())
    dist.all_reduce(first)
    reference = first.item() / dist.get_world_size()  # tensor-parallel ranks share a batch: the mean is its loss
    engine = make_engine(plan, cpu)
    loaded = engine.evaluate([batches.micro_batch(0, 0)]).detach().clone()  # eval mode, as the reference
    dist.all_reduce(loaded)
    losses = []
    for step in range(3):
        total = engine.forward_backward([batches.micro_batch(step, 0)]).detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / plan.layout.ranks_per_stage)
        engine.step(plan.trainer.lr)
    model = getattr(engine.model, "module", engine.model)
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    resumed = None
    if "lora" in name:  # a checkpoint of a LoRA run restores the adapters and their optimizer exactly
        folder = checkpoint.save(engine, Path(path).parent / "checkpoints", 3, rank == 0, {})
        expected = engine.forward_backward([batches.micro_batch(3, 0)]).detach().clone()
        fresh = make_engine(plan, cpu)
        fresh.load(folder)
        resumed = (fresh.forward_backward([batches.micro_batch(3, 0)]) - expected).abs().item()
        del fresh
    if rank == 0:
        loaded = loaded.item() / plan.layout.ranks_per_stage
        result = json.dumps(
            {"loaded": loaded, "losses": losses, "reference": reference, "trainable": trainable, "resumed": resumed}
        )
        print(f"RESULT {name} {result}", flush=True)  # one write: the other rank's logs share the stream
    del engine
"""


def test_every_strategy_loads_the_checkpoint_and_trains_alike(tmp_path, hf_checkpoints):
    def common(architecture: str) -> tuple[str, ...]:
        path = hf_checkpoints[architecture]
        return ("model=hf", f"model.path={path}", "parallelism.micro_batch=2", "trainer.lr=1e-3")

    cases = {name: ("qwen2", overrides) for name, overrides in STRATEGIES.items()}
    for architecture, names in FAMILIES.items():
        cases |= {f"{architecture}-{name}": (architecture, STRATEGIES[name]) for name in names}
    plans = {name: tiny_plan(*common(architecture), *overrides) for name, (architecture, overrides) in cases.items()}
    results = run_plans_on_two_ranks(SCRIPT, plans, tmp_path, timeout=400)
    assert set(results) == set(cases)
    for name, result in results.items():
        assert result["loaded"] == pytest.approx(result["reference"], abs=LOADED_TOLERANCE), name
        assert result["losses"][-1] < result["losses"][0], name
        reference = results["ddp" if name in STRATEGIES else f"{cases[name][0]}-ddp"]
        if "lora" not in name and "tp" not in name:  # tp=2 on two ranks trains on one data-parallel rank's batches
            assert result["losses"] == pytest.approx(reference["losses"], abs=TRAINED_TOLERANCE), name
    assert results["fsdp-lora"]["trainable"] and all(".lora_" in n for n in results["fsdp-lora"]["trainable"])
    assert results["fsdp-lora"]["resumed"] < 1e-6


def test_a_pretrained_model_fine_tunes_on_conversations_with_its_own_tokenizer(tmp_path, hf_tokenizer):
    """model=hf with data.format=chat and no data.tokenizer: the checkpoint's tokenizer (with its chat template)
    encodes the conversations, the loss counts the assistant's tokens only, LoRA trains, and the export
    carries the tokenizer. One process: none of this is per rank (the strategies' loading over two ranks, LoRA's
    included: test_every_strategy_loads_the_checkpoint_and_trains_alike)."""
    checkpoint = save_checkpoint(tmp_path / "llama", "llama", vocab=512)
    for file in hf_tokenizer.iterdir():
        shutil.copy(file, checkpoint / file.name)
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"messages": conversation} for conversation in conversations(300)])
    overrides = ("data=local", f"data.path={data}", "data.format=chat", "data.validation=0.2")
    lora = ("model=hf", f"model.path={checkpoint}", "model.lora.rank=4", "hardware.processes_per_node=1")
    plan = tiny_plan(*lora, "trainer.eval_interval=3", *overrides)
    records = train(plan, tmp_path / "run")
    validation = [row["val_loss"] for row in records if "val_loss" in row]
    assert len(validation) == 2 and validation[-1] < validation[0]
    exported = AutoTokenizer.from_pretrained(tmp_path / "run/model")
    assert exported.apply_chat_template(conversations(1)[0], tokenize=False)
    assert (tmp_path / "run/model/adapter/adapter_model.safetensors").is_file()
