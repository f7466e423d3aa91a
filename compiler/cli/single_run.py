"""One run of a verb (no `-m`), composed once: what `hydra.main` does for a single run, with less work.

`hydra.main` composes a command twice (once to read `hydra.mode`, once to run it) and then copies the whole
composed config twice more before the task starts (`hydra.core.utils.run_job`). A single run here is
composed once with Hydra's own `Hydra` object, and the job is started as `run_job` starts it: the run
folder resolved and made, logging configured, `.hydra/config.yaml`, `hydra.yaml` and `overrides.yaml`
written (the same text, by libyaml's emitter; `dockyard resume` reads the last), `hydra.job.env_set`
applied, the working folder changed when `hydra.job.chdir` asks. A config that sets `hydra.mode: MULTIRUN`
or `hydra.callbacks` goes on to Hydra's own runner as before. The command line's flags other than overrides
and `-cd`/`-cp`/`-cn` (`--cfg`, `--info`, `--help`, `-sc`, `-m`) keep Hydra's own path (`compiler.cli.main`).
"""

import argparse
import functools
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import yaml
from hydra._internal.hydra import Hydra
from hydra._internal.utils import (
    _run_app,
    create_automatic_config_search_path,
    detect_calling_file_or_module_from_task_function,
    detect_task_name,
    run_and_report,
)
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import configure_log, env_override
from hydra.errors import SearchPathException
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf._utils import get_omega_conf_dumper

RUN_MODE = "hydra.mode=RUN"
"""The override Hydra adds to a single run whose config names no mode; `hydra.yaml` lists it."""


SWEEP_SIGNS = (",", "(", "hydra.mode")
"""What a sweep's overrides (`a=1,2`, `a=range(3)`, `hydra.mode=MULTIRUN`) hold; a list value (`a=[1,2]`)
holds one too and takes Hydra's path, which runs it the same, only slower."""


def is_single_run(flags: argparse.Namespace) -> bool:
    """A command line this module runs: a plain run, whatever its config folders."""
    return not any(sign in override for override in flags.overrides for sign in SWEEP_SIGNS) and not (
        flags.multirun
        or flags.cfg
        or flags.info
        or flags.help
        or flags.hydra_help
        or flags.shell_completion
        or flags.resolve
        or flags.experimental_rerun
    )


def run(task: Callable[[DictConfig], None], flags: argparse.Namespace, config_path: str, config_name: str) -> None:
    """Compose `flags.overrides` once and run `task` on it, as `hydra.main` would run it."""
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, flags.config_path or config_path)
    if flags.config_dir is not None:
        config_dir = os.path.abspath(flags.config_dir)
        if not os.path.isdir(config_dir):
            raise SearchPathException(f"Additional config directory '{config_dir}' not found")
        search_path.prepend("command-line", f"file://{config_dir}", anchor=SearchPathQuery(provider="schema"))
    name = flags.config_name or config_name
    hydra = run_and_report(
        lambda: Hydra.create_main_hydra2(detect_task_name(calling_file, calling_module), search_path)
    )
    try:
        overrides = list(flags.overrides)
        cfg = hydra.compose_config(name, overrides, run_mode=RunMode.RUN, with_log_configuration=True)
        if cfg.hydra.mode is RunMode.MULTIRUN or cfg.hydra.callbacks:  # the config's own sweep or callbacks
            return _run_app(True, False, cfg.hydra.mode, hydra, name, task, overrides)
        if cfg.hydra.mode is None:
            with read_write(cfg.hydra), open_dict(cfg.hydra):
                cfg.hydra.mode = RunMode.RUN
                cfg.hydra.overrides.hydra.append(RUN_MODE)
        _run_job(task, cfg)
    finally:
        GlobalHydra.instance().clear()


def _to_yaml(node: DictConfig | ListConfig) -> str:
    """`OmegaConf.to_yaml`'s text, written by libyaml's emitter where PyYAML has it (a quarter of the time)."""
    container = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
    return yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=_dumper())


@functools.cache
def _dumper() -> type:
    dumper = get_omega_conf_dumper()  # OmegaConf's quoting of strings that read as numbers or booleans
    if not yaml.__with_libyaml__:
        return dumper
    return type("Dumper", (yaml.CDumper,), {"yaml_representers": dumper.yaml_representers})


def _run_job(task: Callable[[DictConfig], None], cfg: DictConfig) -> None:
    """`hydra.core.utils.run_job` for one run, with one copy of each part of the config where it makes three: Hydra
    sets `HydraConfig` twice (each a deep copy of the `hydra` node) and deep-copies the whole config for the
    task. Here `HydraConfig` is set once and its copy given the run folder too, and the task's config is the
    config without its `hydra` node, copied alone (`_task_config`)."""
    old_cwd, old_hydra_cfg = os.getcwd(), HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)  # `hydra.run.dir` may read `${hydra:...}`
    hydra_cfg = HydraConfig.instance().cfg
    output_dir = os.path.abspath(str(OmegaConf.select(cfg, "hydra.run.dir")))
    for runtime in (cfg.hydra.runtime, hydra_cfg.hydra.runtime):
        with read_write(runtime), open_dict(runtime):
            runtime.output_dir = output_dir
    try:
        task_cfg = _task_config(cfg)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        if cfg.hydra.job.chdir:
            os.chdir(output_dir)
        configure_log(cfg.hydra.job_logging, cfg.hydra.verbose)
        if cfg.hydra.output_subdir is not None:
            folder = Path(output_dir, cfg.hydra.output_subdir)
            folder.mkdir(parents=True, exist_ok=True)
            for name, node in (("config", task_cfg), ("hydra", hydra_cfg), ("overrides", cfg.hydra.overrides.task)):
                (folder / f"{name}.yaml").write_text(_to_yaml(node), encoding="utf-8")
        with env_override(hydra_cfg.hydra.job.env_set):
            task(task_cfg)
    finally:
        HydraConfig.instance().cfg = old_hydra_cfg
        os.chdir(old_cwd)


def _task_config(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` without its `hydra` node (what Hydra's `run_job` gives the task), made without copying that
    node: it is taken out of `cfg` while the rest is pickled (a third of `copy.deepcopy`'s time, as in
    `compiler.config.cache`), and put back, so that the `hydra` node `HydraConfig` holds still finds its
    interpolations (`${hydra.job.name}`, `${name}`) in `cfg`."""
    content = cfg.__dict__["_content"]  # omegaconf's own map of the node's children
    hydra_node = content.pop("hydra")
    try:
        return pickle.loads(pickle.dumps(cfg))
    finally:
        content["hydra"] = hydra_node
