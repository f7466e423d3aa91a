"""A PEFT adapter evaluated on its base without merging (`dockyard eval model=hf model.path=ADAPTER`, the harness's
`pretrained=BASE,peft=ADAPTER`). An adapter folder holds `adapter_config.json` and no model: the evaluation's
model becomes the base its config names (`base_model_name_or_path`, a folder, absolute or relative to the
adapter's), which travels with the job as any `model.path` does, and the adapter goes to `eval.adapter`, which
the image carries. A base that is not a model folder here is refused before anything is built: the explicit
form, `model.path=BASE eval.adapter=ADAPTER`, names one anywhere (an s3:// prefix or a Hub id too).
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from compiler.config.pretrained import CONFIG_FILE
from compiler.spec import files, schema
from compiler.spec.errors import ConfigError, shown

ADAPTER_CONFIG = "adapter_config.json"
BASE_KEY = "base_model_name_or_path"


def is_adapter(folder: Path) -> bool:
    """A folder of peft's `save_pretrained`: an adapter's config and weights, no model of its own."""
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / CONFIG_FILE).is_file()


def on_base(cfg: DictConfig) -> None:
    """Point an evaluation whose `model.path` is an adapter at its base, the adapter in `eval.adapter`, before the
    base's config.json is read; check `eval.adapter` when it is given."""
    given = OmegaConf.select(cfg, "eval.adapter")
    evaluating = OmegaConf.select(cfg, "job") in (schema.Job.evaluate, schema.Job.evaluate.value)
    if given and not evaluating:
        raise ConfigError("eval.adapter", "is scored by dockyard eval", "leave eval.adapter out of a launch")
    if given:
        if not Path(given).is_absolute() or not is_adapter(Path(given)):
            raise ConfigError(
                "eval.adapter",
                f"{shown(given)} is not a PEFT adapter folder ({ADAPTER_CONFIG} without a model)",
                "give the absolute path of the folder peft's save_pretrained wrote",
            )
        if base := OmegaConf.select(cfg, "model.path"):
            refuse_merged(Path(given), Path(base), "eval.adapter")
        return
    path = OmegaConf.select(cfg, "model.path")
    if evaluating and path and is_adapter(Path(path)):
        adapter = Path(path).absolute()
        cfg.model.path = str(adapter_base(adapter))
        cfg.eval.adapter = str(adapter)


def adapter_base(adapter: Path) -> Path:
    """The model folder the adapter's config names as its base."""
    named = files.read_json_object(adapter / ADAPTER_CONFIG, "model.path").get(BASE_KEY)
    base = (adapter / named).resolve() if isinstance(named, str) and named else None
    if base is None or not (base / CONFIG_FILE).is_file():
        raise ConfigError(
            "model.path",
            f"{adapter} is a PEFT adapter whose base ({BASE_KEY}: {shown(named)} in its {ADAPTER_CONFIG}) is not a "
            "model folder here",
            "give the base too: model.path=BASE eval.adapter=ADAPTER (BASE a folder, s3:// prefix or Hub id)",
        )
    refuse_merged(adapter, base, "model.path")
    return base


def refuse_merged(adapter: Path, base: Path, key: str) -> None:
    """A LoRA run's export is the merged model with its adapter inside: the adapter on it would count twice."""
    if base.is_dir() and adapter.resolve().is_relative_to(base.resolve()):
        raise ConfigError(
            key,
            f"{adapter} is the adapter of the merged model around it ({base}), which already holds it",
            f"evaluate the merged model (model.path={base}), or the adapter on the checkpoint the run trained from: "
            f"model.path=CHECKPOINT eval.adapter={adapter}",
        )
