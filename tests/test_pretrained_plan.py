"""`model=hf` as the planner sees it: the shape read from the checkpoint's config.json (a folder or one S3
object), parameter counts equal to the model transformers builds, the same plan as the built-in model of
that shape, and one-line refusals for what a Hugging Face model cannot run with."""

import json
import subprocess
import sys

import pytest
import torch

from compiler.config.compose import compose_config
from compiler.planner import models
from compiler.spec.errors import ConfigError
from entrypoint.trainer.models import MODELS
from tests.helpers import plan_for
from tests.pretrained import save_checkpoint

LLAMA3_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
}
"""Meta-Llama-3-8B's config.json, the keys the planner reads."""


def test_lora_counts_its_adapters_and_shrinks_the_optimizer(hf_checkpoints):
    plain = ("model=hf", f"model.path={hf_checkpoints['llama']}", "hardware=p4d.24xlarge", "parallelism=ddp")
    lora = ("model.lora.rank=8", "model.lora.targets=[q_proj,v_proj,down_proj]")
    model = plan_for(*plain, *lora).model
    with torch.device("meta"):
        built = MODELS["hf"].build(model)
    adapters = sum(p.numel() for name, p in built.named_parameters() if ".lora_" in name)
    assert adapters == models.model_facts(model).lora > 0
    full, adapted = plan_for(*plain).estimate.memory, plan_for(*plain, *lora).estimate.memory
    assert adapted.parameters == full.parameters
    assert adapted.optimizer < full.optimizer / 10 and adapted.gradients < full.gradients / 10


def test_a_config_json_alone_plans_as_the_built_in_llama3_8b(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    built_in = plan_for("experiment=llama3-8b-p5x4")
    pretrained = plan_for("experiment=llama3-8b-p5x4", "model=hf", f"model.path={tmp_path}")
    assert pretrained.model.seq_len == built_in.model.seq_len == 8192
    assert pretrained.parameters == built_in.parameters
    assert abs(pretrained.estimate.memory.total / built_in.estimate.memory.total - 1) < 0.01
    assert pretrained.estimate.host_memory["checkpoint load"] == 8 * 128256 * 4096 * 4  # 8 processes, 1 tensor


def test_the_config_json_is_read_from_s3(aws, hf_checkpoints):
    body = (hf_checkpoints["qwen2"] / "config.json").read_bytes()
    aws.client("s3").put_object(Bucket="dockyard-example-data", Key="models/qwen2/config.json", Body=body)
    model = plan_for("model=hf", "model.path=s3://dockyard-example-data/models/qwen2/").model
    assert (model.architecture, model.layers, model.hidden, model.kv_heads) == ("qwen2", 2, 64, 2)
    with pytest.raises(ConfigError, match=r"^model.path: cannot read s3://dockyard-example-data/nothing/config.json"):
        compose_config(["model=hf", "model.path=s3://dockyard-example-data/nothing"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("model.layers=3",), r"model.layers: is read from .*config.json for model.family=hf; drop model.layers"),
        (("parallelism.pp=2",), r"parallelism.pp: model=hf runs without pipeline parallelism; set parallelism.pp=1"),
        (
            ("parallelism=fsdp", "parallelism.tp=2"),
            r"parallelism.tp: transformers has no tensor-parallel plan for gpt2",
        ),
        (("parallelism.activation_checkpointing=selective",), r"recomputes whole decoder layers"),
        (("model.lora.rank=-1",), r"model.lora: needs rank >= 0"),
    ],
)
def test_what_a_pretrained_model_cannot_run_with_is_one_line(overrides, message, hf_checkpoints):
    with pytest.raises(ConfigError, match=message):
        plan_for("model=hf", f"model.path={hf_checkpoints['gpt2']}", *overrides)


def test_a_folder_without_config_json_and_lora_on_the_built_in_model_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^model.path: .* holds no config.json; point it at a save_pretrained"):
        compose_config(["model=hf", f"model.path={tmp_path}"])
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"^model.path: .*config.json is not JSON"):
        compose_config(["model=hf", f"model.path={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^model.lora.rank: adapts a pretrained model"):
        plan_for("model.lora.rank=8")


def test_the_cli_plans_a_pretrained_model_in_one_process_without_torch(hf_checkpoints, tmp_path):
    """`dockyard plan` reads config.json with the standard library: no torch, no transformers on the host."""
    script = (
        "import sys; from compiler.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "plan", "model=hf", f"model.path={hf_checkpoints['qwen3']}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "model     hf" in result.stdout


def test_a_checkpoint_only_its_owner_can_read_is_refused_before_anything_runs(tmp_path):
    folder = save_checkpoint(tmp_path / "llama", "llama", readable=False)
    with pytest.raises(
        ConfigError, match=rf"^model.path: .*model.safetensors is readable only by its owner.*chmod -R a\+rX {folder}$"
    ):
        plan_for("model=hf", f"model.path={folder}")
