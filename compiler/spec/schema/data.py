"""The `data/` group: where the training data comes from and how it becomes tokens."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class DataSource(Enum):
    synthetic = "synthetic"
    local = "local"
    s3 = "s3"
    fsx = "fsx"
    efs = "efs"
    hf = "hf"
    """Hugging Face datasets (`data.name` or `data.mixture`), read on the nodes with `datasets.load_dataset`:
    from the datasets cache, a local folder, or the Hub where the nodes reach it."""


class InputMode(Enum):
    File = "File"
    FastFile = "FastFile"


class DataFormat(Enum):
    tokens = "tokens"
    """Pre-tokenized arrays (.bin/.npy/.tokens), read as they are."""
    text = "text"
    """Documents: JSONL (also .jsonl.gz, .jsonl.zst), .txt (one document per file), Parquet or a `datasets`
    folder written by `save_to_disk`, tokenized once into the token cache."""
    chat = "chat"
    """Conversations: JSONL/Parquet rows with a `messages` list of {role, content}, rendered with the
    tokenizer's chat template."""
    preference = "preference"
    """Preference pairs (`trainer.objective=dpo`): rows with `prompt`, `chosen` and `rejected`, all text or all
    message lists (rendered as chat is); each completion a window of its own, its tokens the targets."""

    @property
    def rendered(self) -> bool:
        """Whether transformers renders the records (a chat template, or a prompt and completion joined)."""
        return self in (DataFormat.chat, DataFormat.preference)


class LossOn(Enum):
    assistant = "assistant"
    all = "all"


class PackingStrategy(Enum):
    """How `data.packing` fills windows (TRL's `packing_strategy`)."""

    wrapped = "wrapped"
    """The stream of documents cut into consecutive windows: every slot filled, a document split where a window
    ends (TRL's `wrapped`)."""
    bfd = "bfd"
    """Whole documents placed into windows by best-fit decreasing, the room left padded: no document split (TRL's
    `bfd`); one longer than a window follows `data.overlong`."""


class Overlong(Enum):
    """What becomes of a record longer than its own window (seq_len + 1 tokens)."""

    truncate = "truncate"
    """Cut at the end (a preference pair's prompt kept first, as TRL's `truncation_mode=keep_start`)."""
    drop = "drop"
    """Left out of training (a preference pair when either completion is too long)."""


RENAMES = ("columns", "message_keys", "roles")
"""The fields (of `data` and of each mixture entry) that name a dataset's columns, message keys and roles
otherwise than the row shapes do."""


@dataclass
class DataConfig:
    source: DataSource = DataSource.synthetic
    """Where the token files come from: synthetic (generated), local, s3, fsx or efs."""
    path: str | None = None
    """local: a host folder of token files; fsx/efs: the directory inside the file system."""
    uri: str | None = None
    """s3: the prefix holding the token files (s3://bucket/prefix)."""
    channel: str = "train"
    """The SageMaker channel the data arrives in (/opt/ml/input/data/<channel>)."""
    groups: list[str] = field(default_factory=list)
    """With `hardware.groups`: the instance groups the channel reaches (all of them when empty)."""
    input_mode: InputMode = InputMode.File
    """s3: File (downloaded before training) or FastFile (streamed on read), as SageMaker names them."""
    file_system_id: str | None = None
    """fsx (fs-...) or efs (fs-...) file system id."""
    claim: str | None = None
    """fsx/efs on Kubernetes: the PersistentVolumeClaim that mounts the file system (`path` is inside it)."""
    name: str | None = None
    """hf: the dataset, as `load_dataset` takes it: a Hub id (HuggingFaceH4/ultrachat_200k), a folder of
    JSON/Parquet files, or a folder `save_to_disk` wrote."""
    config: str | None = None
    """hf: the dataset's configuration (its subset), if it has several."""
    split: str = "train"
    """hf: the split trained on (a `datasets` split expression such as train[:10%] also works)."""
    mixture: list[Any] = field(default_factory=list)
    """hf: several datasets trained on together instead of `data.name`, each {name, config, split, weight} (and its
    own columns, message_keys, roles): the first `weight` fraction (0 < weight <= 1, default 1) of each split's
    rows kept, in order, as the alignment-handbook's and TRL's `dataset_mixture` takes them; each in its own row
    shape."""
    columns: dict[str, Any] = field(default_factory=dict)
    """hf: the dataset's column for each column a row shape reads that it names otherwise, like {prompt:
    conversation} (axolotl's `field_messages`, `field_chosen`, `field_rejected`); a mixture entry may give its own."""
    message_keys: dict[str, Any] = field(default_factory=dict)
    """hf: the keys of a message that hold its role and content, if not `role` and `content`, like {role: from,
    content: value} (axolotl's `message_property_mappings`); a mixture entry may give its own."""
    roles: dict[str, Any] = field(default_factory=dict)
    """hf: the names the data gives each role, if not the role's own, like {user: [human], assistant: [gpt]}
    (axolotl's `roles`); a mixture entry may give its own."""
    token_dtype: str = "uint16"
    """Element type of the token files: uint16 (vocab < 65,536) or uint32."""
    format: DataFormat = DataFormat.tokens
    """tokens (pre-tokenized arrays), text (documents), chat (conversations, for supervised fine-tuning) or
    preference (chosen/rejected pairs, for trainer.objective=dpo)."""
    field: str = "text"
    """text: the JSONL/Parquet/datasets column holding each document."""
    tokenizer: str | None = None
    """text/chat: a folder or an s3:// prefix holding a Hugging Face tokenizer (tokenizer.json)."""
    cache: str | None = None
    """text/chat: the folder of the token cache (inside the container; on the local target, a folder of this machine
    mounted at the same path in every node); one that every node sees is filled once, node k tokenizing 1/N of the
    documents (`dockyard tokenize` fills it beforehand); empty means under the checkpoints."""
    packing: bool = True
    """text/chat: documents packed into seq_len windows with EOS between them; false gives each document a
    window of its own (padded, long ones truncated)."""
    packing_strategy: PackingStrategy = PackingStrategy.wrapped
    """text/chat with data.packing: wrapped (documents cut at window edges) or bfd (whole documents per window)."""
    packing_mask: bool = False
    """Document-boundary masking inside packed windows: attention does not cross documents and positions restart
    at each one (the built-in decoder unpipelined, and transformers architectures dockyard knows)."""
    overlong: Overlong = Overlong.truncate
    """A record longer than seq_len + 1 tokens where each has a window of its own (chat or text with
    data.packing=false or data.packing_strategy=bfd, preference pairs): truncate (cut at the end) or drop (left
    out); the run's first lines count them. Wrapped packing cuts documents at window edges instead."""
    max_prompt_length: int | None = None
    """preference: a pair's prompt cut to its last this many tokens (from the left, as TRL's DPO truncates it);
    None keeps the whole prompt."""
    chat_template: str | None = None
    """chat/preference: a chat template's Jinja text, rendered instead of data.tokenizer's own (TRL's and the
    alignment-handbook's inline `chat_template`, axolotl's `chat_template_jinja`); written into the nodes' copy
    of the tokenizer, so the exported model carries it too."""
    eos_token: str | None = None
    """The end-of-sequence token instead of data.tokenizer's own (axolotl's `special_tokens.eos_token`): a token of
    its vocabulary, put after each document and given to chat templates as `eos_token`."""
    loss_on: LossOn = LossOn.assistant
    """chat: the tokens the loss is computed on: assistant (the replies only) or all."""
    validation: Any = None
    """text/chat: held-out data, a fraction of the documents (0.1, chosen by a seeded draw), a number of them (2000:
    that many rows drawn, as datasets' `train_test_split(test_size=2000)`), or the relative path of a file or
    folder inside the data folder (held out whole); a number or a path, so typed Any. With data=hf, a name is the
    held-out split (test) of each dataset."""
    tokens: int | None = None
    """The dataset's token count, if known: the plan then says how many epochs the steps cover."""
