"""A recipe's datasets as `data=hf`: TRL's and the alignment-handbook's `dataset_name` (with its config and
splits), the handbook's `dataset_mixture` (and its older `dataset_mixer` with `dataset_splits`), and axolotl's
`datasets:` list. Each dataset keeps its own row shape (the data package reads alpaca, ShareGPT, messages,
prompt/completion and pairs with an explicit or implicit prompt row by row), so a type names no conversion.
"""

from typing import Any

from compiler.config.recipe_keys import Conversion

READ_AS_ROWS = ("type", "field_messages", "message_property_mappings", "field_chosen", "field_rejected", "roles")
"""axolotl's per-dataset keys that say how to read a row, which dockyard tells from the row itself."""
ROW_KEYS = {
    "field_messages": ("messages", "conversations"),
    "field_chosen": ("chosen",),
    "field_rejected": ("rejected",),
    "message_property_mappings": ({"role": "role", "content": "content"}, {"role": "from", "content": "value"}),
}
"""The values of axolotl's row keys that name the columns and fields the row shapes read."""


def port_data(out: Conversion, recipe: dict[str, Any]) -> None:
    """The recipe's datasets as `data=hf` overrides; a refusal for what `data.mixture` cannot say."""
    try:
        entries, held_out = _entries(out, recipe)
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
    else:
        out.set("data.mixture", "[" + ", ".join(_entry(entry) for entry in entries) + "]")
    if held_out is not None:
        out.set("data.validation", held_out)


def _keys(recipe: dict[str, Any]) -> str:
    names = ("dataset_name", "dataset_mixture", "dataset_mixer", "datasets")
    return ", ".join(key for key in names if recipe.get(key))


def _entry(entry: dict[str, Any]) -> str:
    """A mixture entry as a Hydra override writes it: {name: 'org/set', split: 'train', weight: 0.5}."""
    return "{" + ", ".join(f"{key}: {value!r}" for key, value in entry.items()) + "}"


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
    if size is None:
        return entries, None
    if not 0 < float(size) < 1:
        out.refuse("dataset_mixture.test_split_size", f"{size} rows: dockyard holds out a fraction (data.validation)")
        return entries, None
    return entries, float(size)


def _axolotl(out: Conversion, dataset: dict[str, Any], number: int) -> dict:
    """An axolotl dataset: `path` (a Hub id or a folder), `name` its config, `split`; its row keys refused where
    they name columns or roles other than those of the row shapes dockyard reads."""
    unread = sorted(set(dataset) - {"path", "name", "split", *READ_AS_ROWS})
    if unread:
        raise ValueError(unread)
    for key, read in ROW_KEYS.items():
        if key in dataset and dataset[key] not in read:
            out.refuse(
                f"datasets[{number}].{key}",
                f"{dataset[key]!r} is not read: dockyard reads rows of its shapes ({' or '.join(map(str, read))}); "
                "rename the columns in the dataset",
            )
    roles = dataset.get("roles") or {}
    if any(not isinstance(names, list) or role not in names for role, names in roles.items()):
        out.refuse(f"datasets[{number}].roles", "maps roles dockyard does not: rename them in the dataset")
    return _clean({"name": str(dataset["path"]), "config": dataset.get("name"), "split": dataset.get("split")})


def _clean(entry: dict[str, Any]) -> dict:
    """The entry without unset keys, a weight of 1 (all rows) or the default split."""
    return {k: v for k, v in entry.items() if v is not None and not (k == "weight" and float(v) == 1.0)}
