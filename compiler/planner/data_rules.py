"""The rules of documents and conversations (`data.format=text|chat`): a source to read them from, a
tokenizer that fits the model, a chat template for chat, and a validation split the trainer can hold out.

A tokenizer on this machine is read here, before anything is built; one on S3 is checked by the trainer
when it has downloaded it.
"""

from collections.abc import Iterator
from pathlib import Path

from compiler.core import grammar
from compiler.core.architectures import ARCHITECTURES
from compiler.core.capabilities import TargetCapabilities
from compiler.planner import hub_rules
from compiler.planner.tokenize_job import unshared_cache_warning
from compiler.spec import Layout, schema
from compiler.spec.contract import SYSTEM_FOLDERS, TOKENIZER_CHANNEL
from compiler.spec.errors import ConfigError
from compiler.spec.token_cache_key import sources
from compiler.spec.tokenizer import TOKENIZER_FILE, TokenizerFacts, tokenizer_location


def check_format(config: schema.Config, targets: TargetCapabilities) -> Iterator[str]:
    data = config.data
    _check_evaluation(config)
    _check_overlong(data)
    if data.claim is not None and data.source not in (schema.DataSource.fsx, schema.DataSource.efs):
        raise ConfigError(  # an option no target reads here would otherwise pass without a word
            "data.claim",
            f"mounts a file system (data=fsx or efs), and data={data.source.value} reads none",
            "remove data.claim, or use data=fsx or efs",
        )
    folders = hub_rules.check_hub(data)
    if data.tokens is not None and data.tokens < 1:
        raise ConfigError("data.tokens", f"{data.tokens} is not a token count", "give the dataset's token count")
    if data.format is schema.DataFormat.tokens:
        if config.job is schema.Job.tokenize:
            raise ConfigError(
                "data.format",
                "tokens: token files are read as they are, there is nothing to tokenize",
                "set data.format=text, chat or preference for `dockyard tokenize`",
            )
        if data.source is schema.DataSource.hf:
            raise ConfigError("data.format", "data=hf reads rows, not token arrays", "set data.format=text or chat")
        if data.validation is not None:
            raise ConfigError(
                "data.validation",
                "holds out documents, which token arrays do not have",
                "set data.format=text or chat, or remove data.validation",
            )
        if data.eos_token is not None or data.chat_template is not None:
            key = "data.eos_token" if data.eos_token is not None else "data.chat_template"
            raise ConfigError(key, "replaces the tokenizer's, and token arrays are read as they are", f"remove {key}")
        return
    if data.source is schema.DataSource.synthetic:
        raise ConfigError(
            "data.source",
            f"data.format={data.format.value} reads documents, synthetic data has none",
            "use data=local, s3, fsx or efs with data.path or data.uri",
        )
    if data.channel == TOKENIZER_CHANNEL:
        raise ConfigError(
            "data.channel", f"'{TOKENIZER_CHANNEL}' is the channel of a host tokenizer folder", "name it train"
        )
    if not data.field:
        raise ConfigError("data.field", "is empty", "name the column holding the text, like data.field=text")
    _check_replaced_tokens(data)
    _check_cache(data.cache)
    _check_validation(data)
    yield from unshared_cache_warning(config)
    facts = _tokenizer_facts(config, targets)
    if facts is None:
        yield "data.tokenizer is on S3: its vocabulary and chat template are checked when the job starts"
        return
    check_tokenizer(config, facts)
    if data.format.rendered and folders:
        from compiler.planner import chat_templates

        chat_templates.check_first_records(facts, [found for folder in folders for found in sources(folder)])


def check_packing_mask(config: schema.Config, layout: Layout) -> None:
    """Whole-document packing needs documents packed (text, chat). Document-boundary masking needs documents
    packed into windows, and a model whose every layer sees the documents' positions: the built-in decoder
    unpipelined, or a transformers architecture whose causal mask follows position_ids that restart
    (`find_packed_sequence_indices`, transformers 5.x)."""
    data, model = config.data, config.model
    if data.packing_strategy is schema.PackingStrategy.bfd and (
        not data.packing or data.format not in (schema.DataFormat.text, schema.DataFormat.chat)
    ):
        raise ConfigError(
            "data.packing_strategy",
            "bfd places whole documents into packed windows, and this data packs none",
            "set data.packing=true with data.format=text or chat, or drop data.packing_strategy",
        )
    if not data.packing_mask:
        return
    if data.format is schema.DataFormat.tokens:
        raise ConfigError(
            "data.packing_mask", "token arrays have no document boundaries", "use data.format=text or chat"
        )
    if not data.packing:
        raise ConfigError(
            "data.packing_mask",
            "masks documents inside packed windows, and data.packing=false gives each document its own",
            "set data.packing=true, or data.packing_mask=false",
        )
    if layout.pp > 1:
        raise ConfigError(
            "data.packing_mask",
            "pipeline stages pass hidden states without the documents' positions",
            "set parallelism.pp=1, or data.packing_mask=false",
        )
    if model.family == "hf" and model.architecture not in ARCHITECTURES:
        raise ConfigError(
            "data.packing_mask",
            f"packed-sequence masking is checked for {', '.join(ARCHITECTURES)} only, not {model.architecture}",
            "set data.packing_mask=false",
        )


def check_tokenizer(config: schema.Config, facts: TokenizerFacts) -> None:
    """What the model and the format need of the tokenizer (the trainer runs it again on one from S3)."""
    if facts.vocab > config.model.vocab:
        raise ConfigError(
            "data.tokenizer",
            f"its {facts.vocab:,} token ids exceed model.vocab={config.model.vocab:,}",
            f"set model.vocab={facts.vocab} or more, or use the model's own tokenizer",
        )
    if facts.eos_id is None and config.data.eos_token is not None:
        raise ConfigError(
            "data.eos_token",
            f"{grammar.shown(config.data.eos_token)} is not a token of the tokenizer",
            "give one of its special tokens, or remove data.eos_token to use its own",
        )
    if facts.eos_id is None:
        raise ConfigError(
            "data.tokenizer",
            "names no eos_token in tokenizer_config.json, which packing puts between documents",
            "use a tokenizer with an end-of-text token",
        )
    if config.data.format is schema.DataFormat.chat and not facts.chat_template:
        raise ConfigError(
            "data.format",
            "chat needs the tokenizer's chat template, and it has none",
            "use a tokenizer with chat_template (chat_template.jinja), or data.format=text",
        )
    if config.data.format.rendered:
        from compiler.planner import chat_templates  # jinja2 for chat and pairs only: `dockyard plan` starts fast

        chat_templates.check_templates(facts, "data.tokenizer")
        local = config.data.source is schema.DataSource.local and config.data.path and Path(config.data.path).exists()
        chat_templates.check_first_records(facts, sources(Path(config.data.path)) if local else [])


def _tokenizer_facts(config: schema.Config, targets: TargetCapabilities) -> TokenizerFacts | None:
    location = tokenizer_location(config.data, config.model)
    if location is None:
        raise ConfigError(
            "data.tokenizer",
            "is missing",
            "set data.tokenizer to a folder or s3:// prefix holding a Hugging Face tokenizer",
        )
    if location.startswith("s3://"):
        grammar.check_s3_uri("data.tokenizer", location)
        return None
    if location == config.model.path and not Path(location).is_absolute():
        return None  # a Hub model's own tokenizer: the nodes fetch it with the model
    folder = Path(location)
    if not folder.is_absolute() or not (folder / TOKENIZER_FILE).is_file():
        raise ConfigError(
            "data.tokenizer",
            f"{grammar.shown(location)} is not a folder holding {TOKENIZER_FILE}",
            "give the absolute path of a saved Hugging Face tokenizer, or an s3:// prefix",
        )
    if not targets.own.host_folders:
        raise ConfigError(
            "data.tokenizer",
            f"a host folder cannot reach target={config.target.kind.value}",
            "upload it to S3 and give its s3:// prefix",
        )
    return TokenizerFacts.read(folder, data=config.data)


def _check_replaced_tokens(data: schema.DataConfig) -> None:
    """`data.chat_template` renders conversations, and compiles (checked here even where the tokenizer is read on
    the nodes only); `data.eos_token` is one token's text."""
    if data.eos_token is not None and (not data.eos_token or not data.eos_token.isprintable()):
        raise ConfigError(
            "data.eos_token", f"{grammar.shown(data.eos_token)} is no token's text", "give a token like </s>"
        )
    if data.chat_template is None:
        return
    if not data.format.rendered:
        raise ConfigError(
            "data.chat_template",
            f"renders conversations, and data.format={data.format.value} reads documents",
            "set data.format=chat (or preference), or remove data.chat_template",
        )
    from compiler.planner import chat_templates

    chat_templates.check_template("data.chat_template", "the template", data.chat_template)


def _check_overlong(data: schema.DataConfig) -> None:
    """data.overlong=drop leaves out records that have a window each (unpacked documents, preference pairs)."""
    if data.overlong is not schema.Overlong.drop:
        return
    if data.format is schema.DataFormat.tokens:
        raise ConfigError("data.overlong", "drop leaves out records, and token arrays have none", "remove it")
    if data.packing and data.format is not schema.DataFormat.preference:
        raise ConfigError(
            "data.overlong",
            "drop leaves out records longer than their own window, and packed windows carry a document on into "
            "the next window instead",
            "set data.packing=false, or data.overlong=truncate",
        )


def _check_cache(cache: str | None) -> None:
    fix = "give a folder of its own inside the container, like /opt/ml/checkpoints/token-cache"
    if cache is None:
        return
    path = Path(cache)
    if not path.is_absolute() or not cache.isprintable():
        raise ConfigError("data.cache", f"{grammar.shown(cache)} is not an absolute path on one line", fix)
    if ".." in path.parts or len(path.parts) < 2 or path.parts[1] in SYSTEM_FOLDERS:
        raise ConfigError("data.cache", f"{grammar.shown(cache)} is, or climbs into, a system folder", fix)


def _check_validation(data: schema.DataConfig) -> None:
    held_out = data.validation
    if held_out is None:
        return
    if isinstance(held_out, bool) or not isinstance(held_out, (int, float, str)):
        raise ConfigError(
            "data.validation",
            f"{held_out!r} is neither a fraction, a row count nor a path",
            "give a fraction like 0.1, a row count like 2000, or a path inside the data folder",
        )
    if isinstance(held_out, str):
        path = Path(held_out)
        fix = "give the held-out file or folder relative to the data folder, like val.jsonl"
        if path.is_absolute() or ".." in path.parts or not held_out.strip() or not held_out.isprintable():
            raise ConfigError("data.validation", f"{grammar.shown(held_out)} is not a path inside the data folder", fix)
        folder = Path(data.path) if data.source is schema.DataSource.local and data.path else None
        if folder is not None and folder.is_dir() and not (folder / path).exists():
            raise ConfigError("data.validation", f"{grammar.shown(held_out)} is not in {folder}", fix)
    elif isinstance(held_out, int) and held_out < 1:
        raise ConfigError(
            "data.validation",
            f"{held_out} is not a row count",
            "hold out 1 row or more (datasets' test_size=n), or a fraction like 0.1",
        )
    elif isinstance(held_out, float) and not 0 < held_out < 1:
        raise ConfigError(
            "data.validation",
            f"{held_out} is not a fraction between 0 and 1",
            "hold out a fraction of the documents, like data.validation=0.1, or a whole number of rows",
        )


def _check_evaluation(config: schema.Config) -> None:
    trainer = config.trainer
    if trainer.eval_interval < 0:
        raise ConfigError(
            "trainer.eval_interval",
            f"{trainer.eval_interval} is negative",
            "give the steps between validations, or 0 for the end only",
        )
    if trainer.eval_batches < 1:
        raise ConfigError("trainer.eval_batches", f"{trainer.eval_batches} is not a batch count", "use 1 or more")
    if trainer.eval_interval and config.data.validation is None:
        raise ConfigError("trainer.eval_interval", "needs held-out data", "set data.validation=0.1 (or a path)")
    patience = trainer.early_stopping_patience
    if patience < 0 or (patience and not trainer.eval_interval):
        raise ConfigError(
            "trainer.early_stopping_patience",
            f"{patience} is negative" if patience < 0 else "counts validations, and only the last step validates",
            "set trainer.eval_interval (and data.validation) with a patience of 1 or more, or 0 not to stop early",
        )
