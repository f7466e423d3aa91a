"""What the evaluation tests share: a tiny Hugging Face model with a tokenizer, and a folder of the
harness's custom tasks (one multiple-choice, one generation task) whose data files sit beside them."""

import shutil
from pathlib import Path

from tests.pretrained import save_checkpoint
from tests.text_corpus import write_jsonl

MULTIPLE_CHOICE = """\
task: dockyard_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
"""
GENERATION = """\
task: dockyard_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/gen.jsonl
test_split: test
output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
"""
TASKS = ["dockyard_mc", "dockyard_gen"]
DOCUMENTS = 6


def write_tasks(folder: Path) -> Path:
    """The task folder (`eval.include_path`): two YAMLs and their data, named relative to the folder."""
    folder.mkdir(parents=True)
    (folder / "mc.yaml").write_text(MULTIPLE_CHOICE)
    (folder / "gen.yaml").write_text(GENERATION)
    words = ["red", "green", "blue", "model", "run", "train"]
    mc = [
        {"question": f"the {i}th run trains", "choices": [f" {w}" for w in words[:4]], "answer": i % 4}
        for i in range(DOCUMENTS)
    ]
    gen = [{"prompt": f"count {i} and", "answer": f" {words[i]}"} for i in range(DOCUMENTS)]
    write_jsonl(folder / "data/mc.jsonl", mc)
    write_jsonl(folder / "data/gen.jsonl", gen)
    return folder


def tiny_model(folder: Path, tokenizer: Path) -> Path:
    """A tiny random Llama saved with save_pretrained, with the test tokenizer beside it (as an export is)."""
    save_checkpoint(folder, "llama", vocab=512)
    for file in tokenizer.iterdir():
        shutil.copy(file, folder / file.name)
    return folder


def tiny_adapter(folder: Path, base: Path) -> Path:
    """A LoRA adapter on `base`, saved by peft's save_pretrained naming `base` as its base. Its B matrices are
    random (peft starts them at zero, which would score exactly as the base does)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(folder)
    for file in folder.iterdir():
        file.chmod(0o644)
    return folder
