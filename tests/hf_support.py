"""Holding an exported model folder to the built-in module it came from, through transformers."""

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from compiler.spec import ModelConfig
from entrypoint.trainer.models import MODELS

ATOL = 1e-4
"""fp32 logits of about 2.5: GPT-2's are equal, Llama's usually within 2e-6 (RoPE's products summed in another
order), once 6.4e-5 in a CI run (the kernels' summation order follows the threads); a wrong layout is 0.4 off."""


def assert_transformers_logits(module: torch.nn.Module, folder: Path) -> None:
    """`AutoModelForCausalLM.from_pretrained(folder)` computes the module's logits, on random tokens."""
    exported = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokens = torch.randint(0, module.config.vocab, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = module.eval()(tokens), exported(tokens).logits
    torch.testing.assert_close(theirs, ours, atol=ATOL, rtol=0)


def trained_decoder(folder: Path, model: ModelConfig) -> torch.nn.Module:
    """The built-in decoder with the weights its weights format reads from `folder`."""
    spec = MODELS["decoder"]
    module = spec.build(model)
    module.load_state_dict(spec.weights.load(folder))
    return module
