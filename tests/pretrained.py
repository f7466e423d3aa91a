"""Tiny Hugging Face checkpoints made at test time (nothing is downloaded): random weights of a few
architectures, saved with `save_pretrained` as safetensors, as a user's fine-tuning folder would hold them."""

from pathlib import Path

TINY = {
    "llama": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "qwen2": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "qwen3": dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    "gemma": dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
    ),
    "mistral": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "phi3": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
}
"""Architecture → the config of a tiny model of it (64 wide, 2 layers; no dropout, so that strategies'
losses compare step by step)."""
TINY_MOE = {
    "qwen3_moe": dict(
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        output_router_logits=True,
        router_aux_loss_coef=0.01,
    ),
}
"""Mixtures of experts, as `TINY` (4 experts of 32, 2 per token, the balancing loss on as in training)."""
VOCAB = 256
CONTEXT = 128


def hf_config(architecture: str, vocab: int = VOCAB, **shape):
    """`TINY`'s config of `architecture`, its fields `shape` names changed (a wider model, say)."""
    from transformers import AutoConfig

    extra = {} if architecture == "gpt2" else {"max_position_embeddings": CONTEXT}
    fields = (TINY | TINY_MOE)[architecture] | extra | shape
    config = AutoConfig.for_model(architecture, vocab_size=vocab, **fields)
    config.bos_token_id = config.eos_token_id = config.pad_token_id = None
    return config


def save_checkpoint(
    folder: Path,
    architecture: str,
    seed: int = 0,
    readable: bool = True,
    vocab: int = VOCAB,
    fused: bool = False,
    **shape,
) -> Path:
    """A tiny random `architecture` model saved into `folder` (created); returns the folder. safetensors
    writes its files 0600: `readable` opens them to the containers' user, as the plan's error tells users to.
    An MoE's experts are saved one by one, as on the Hub, or `fused` as transformers holds them. `shape`
    changes config fields of `TINY`'s (hidden_size=256 for a model wide enough for a large LoRA rank)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(architecture, vocab, **shape))
    model.save_pretrained(folder, save_original_format=not fused)
    if readable:
        for file in folder.iterdir():
            file.chmod(0o644)
    return folder


def save_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer of fewer than `VOCAB` tokens, trained on a few sentences, saved into `folder`
    as transformers saves one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [f"the {n}th run trains {n % 7} models on {n % 5} nodes" for n in range(200)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=VOCAB - 16, special_tokens=["<unk>", "</s>"]))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="</s>")
    wrapped.save_pretrained(folder)
    return folder
