"""A recipe's datasets as `data=hf`: TRL's and the alignment-handbook's `dataset_name` (with its config and
splits), the handbook's `dataset_mixture` (and its older `dataset_mixer` with `dataset_splits`), and axolotl's
`datasets:` list. Each dataset keeps its own row shape (the data package reads alpaca, ShareGPT, messages,
prompt/completion and pairs with an explicit or implicit prompt row by row), so a type names no conversion.
"""

from typing import Any

from compiler.config.recipe_keys import Conversion
from compiler.spec.schema import RENAMES

READ_AS_ROWS = ("type", "field_messages", "message_property_mappings", "field_chosen", "field_rejected", "roles")
"""axolotl's per-dataset keys that say how to read a row: ported as the entry's renames where they differ from
what the row shapes read."""
SHAREGPT = ("conversations", {"role": "from", "content": "value"})
"""ShareGPT's column and message keys, which the row shapes read as they are."""


def port_data(out: Conversion, recipe: dict[str, Any]) -> None:
    """The recipe's datasets as `data=hf` overrides; a refusal for what `data.mixture` cannot say."""
    try:
        entries, held = _entries(out, recipe)
    except (TypeError, ValueError, AttributeError, KeyError):
        return out.refuse(_keys(recipe), "is not a dataset list dockyard can read")
    if not entries:
        return
    out.set("data", "hf")
    if len(entries) == 1 and entries[0].get("weight", 1.0) == 1.0:
        only = entries[0]
        out.set("data.name", only["name"])
        if only.get("config"):
            out.set("data.config", only["config"])
        if only.get("split", "train") != "train":
            out.set("data.split", only["split"])
        for rename in RENAMES:
            if rename in only:
                out.set(f"data.{rename}", _value(only[rename]))
    else:
        out.set("data.mixture", "[" + ", ".join(_value(entry) for entry in entries) + "]")
    if held is not None:
        out.set("data.validation", held)


def _keys(recipe: dict[str, Any]) -> str:
    names = ("dataset_name", "dataset_mixture", "dataset_mixer", "datasets")
    return ", ".join(key for key in names if recipe.get(key))


def _value(value: Any) -> str:
    """A value in Hydra's override grammar: mappings with bare keys, lists, and quoted texts (a mixture entry:
    {name: 'org/set', split: 'train', weight: 0.5})."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return repr(value)


def _entries(out: Conversion, recipe: dict[str, Any]) -> tuple[list[dict], Any]:
    """The datasets ({name, config, split, weight}) and the held-out split or fraction, if any."""
    if recipe.get("dataset_name"):
        entry = {"name": str(recipe["dataset_name"]), "config": recipe.get("dataset_config")}
        entry["split"] = str(recipe.get("dataset_train_split") or "train")
        evaluates = recipe.get("eval_strategy", recipe.get("evaluation_strategy")) not in (None, "no")
        return [_clean(entry)], str(recipe.get("dataset_test_split") or "test") if evaluates else None
    if isinstance(recipe.get("dataset_mixture"), dict):
        return _handbook_mixture(out, recipe["dataset_mixture"])
    if isinstance(recipe.get("dataset_mixer"), dict):
        splits = recipe.get("dataset_splits") or ["train", "test"]
        train = [s for s in splits if "train" in s] or ["train"]
        entries = [
            _clean({"name": str(name), "split": split, "weight": float(weight)})
            for name, weight in recipe["dataset_mixer"].items()
            for split in train
        ]
        tests = [s for s in splits if "test" in s]
        return entries, tests[0] if tests else None
    if isinstance(recipe.get("datasets"), list):
        return [_axolotl(out, dataset, number) for number, dataset in enumerate(recipe["datasets"], 1)], None
    return [], None


def _handbook_mixture(out: Conversion, mixture: dict[str, Any]) -> tuple[list[dict], Any]:
    entries = [
        _clean({"name": str(d["id"]), "config": d.get("config"), "split": d.get("split"), "weight": d.get("weight")})
        for d in mixture["datasets"]
    ]
    size = mixture.get("test_split_size")
    return entries, None if size is None else held_out(size)


def held_out(size: Any) -> float | int:
    """A held-out size as `train_test_split(test_size=...)` reads it: below 1 a fraction, else a number of rows."""
    if isinstance(size, bool) or float(size) <= 0:
        raise ValueError(size)
    return float(size) if float(size) < 1 else int(size)


def _axolotl(out: Conversion, dataset: dict[str, Any], number: int) -> dict:
    """An axolotl dataset: `path` (a Hub id or a folder), `name` its config, `split`; its row keys as renames where
    they name columns, message keys or roles otherwise than the row shapes read them (its `field_messages` is
    the conversation of an SFT row, the prompt of a DPO row)."""
    unread = sorted(set(dataset) - {"path", "name", "split", *READ_AS_ROWS})
    if unread:
        raise ValueError(unread)
    entry = {"name": str(dataset["path"]), "config": dataset.get("name"), "split": dataset.get("split")}
    keys = dict(dataset.get("message_property_mappings") or {"role": "role", "content": "content"})
    messages = dataset.get("field_messages")
    if (messages, keys) != SHAREGPT:  # otherwise read as ShareGPT, `from` and `value` with its roles
        prompt = "prompt" if out.overrides.get("trainer.objective") == "dpo" else "messages"
        columns = {prompt: messages, "chosen": dataset.get("field_chosen"), "rejected": dataset.get("field_rejected")}
        entry["columns"] = {ours: str(theirs) for ours, theirs in columns.items() if theirs not in (None, ours)}
        entry["message_keys"] = {ours: str(theirs) for ours, theirs in keys.items() if theirs != ours}
    roles = dict(dataset.get("roles") or {})
    entry["roles"] = {role: [str(n) for n in names] for role, names in roles.items() if list(names) != [role]}
    return _clean(entry)


def _clean(entry: dict[str, Any]) -> dict:
    """The entry without unset or empty keys, a weight of 1 (all rows) or the default split."""
    return {k: v for k, v in entry.items() if v not in (None, {}) and not (k == "weight" and float(v) == 1.0)}
