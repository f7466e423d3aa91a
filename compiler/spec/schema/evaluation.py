"""The `eval` node: an evaluation of a model with EleutherAI's lm-evaluation-harness (`dockyard eval`)."""

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    """What `dockyard eval` asks the harness (`lm_eval --model hf`) to run, on the model at `model.path`."""

    tasks: list[str] = field(default_factory=list)
    """Task names: the harness's own (where their data is at hand on the node) or those of the YAML files in
    `include_path`; empty means no evaluation."""
    include_path: str = ""
    """A folder of the harness's custom-task YAML files (its `--include_path`); `data_files` relative to it are
    read from it. It travels in the image, so the job reads it on every target."""
    limit: float | None = None
    """At most this many documents per task (a whole number), or this fraction of them (below 1)."""
    num_fewshot: int | None = None
    """Examples put before each question; None leaves each task's own setting."""
    batch_size: int = 1
    """Requests the model scores at once (scores depend on it slightly, through padding)."""
    seed: int | None = None
    """One seed for all the harness's generators (Python, NumPy, torch, few-shot sampling), as its `--seed N`
    sets them; None keeps the harness's own (0 for Python's, 1234 for the others)."""
    adapter: str = ""
    """A PEFT adapter folder (adapter_config.json) scored on the model at `model.path`, its base, without merging
    (the harness's `peft=`). Set from `model.path` when that names an adapter: its base is then the folder its
    adapter_config.json names (`base_model_name_or_path`). It travels in the image, as `include_path` does."""
    lm_eval: str = "0.4.13"
    """The lm-eval version installed in the evaluation's image."""
