"""`dockyard VERB [hydra overrides...]`.

Each verb is a Hydra app over the same `conf/`, so every Hydra flag works after the verb (`-m`,
`--cfg job`, `--info`, `-cn`/`-cd`, shell completion); the user's own config folder is searched first
(`compiler.config.project`). Hydra's compose errors and dockyard's own
`ConfigError`s end the same way: one line on stderr, exit status 2, nothing left behind.
"""

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import hydra
import yaml
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from compiler.cli import folders, single_run, tasks
from compiler.config.compose import (
    CONF_DIR,
    CONFIG_NAME,
    check_overrides,
    open_maps,
    reject_alias_bombs,
    reject_numbers_in_files,
)
from compiler.config.hydra_errors import as_config_error
from compiler.config.project import config_dirs, user_config_dir
from compiler.launch.errors import InvalidSweepError, PointFailedError
from compiler.spec.errors import ConfigError, PlatformError, UnknownNameError
from compiler.spec.schema import Job

folders.register()
PROG = "dockyard"
USER_ERROR = 2
PLATFORM_ERROR = 1
"""A platform's refusal no config key fixes (`PlatformError`): one line too, but not the user's mistake."""
VERBS: dict[str, Callable[[DictConfig], None]] = {
    "plan": tasks.plan_task,
    "build": tasks.build_task,
    "launch": tasks.launch_task,
    "eval": tasks.eval_task,
}
RUN_VERBS = ("runs", "status", "logs", "stop", "warm-pool")
"""Verbs about launched runs (the list, or one by id or folder); they compose no config."""
TOKENIZE = "tokenize"
"""`dockyard tokenize [overrides]`: a launch whose nodes fill the token cache (`data.cache`), splitting the documents
among them, and end (the plan's `job` is tokenize, which its summary shows too)."""
CONVERT = "convert"
"""`dockyard convert RECIPE`: a Trainer, TRL or axolotl recipe as overrides (`compiler.config.recipes`)."""


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-sc"], ["--shell-completion"]):
        return _complete(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if args else USER_ERROR)
    if "--version" in args[:2] or "-V" in args[:2]:
        from compiler.cli import about  # the verbs that compose start without it (and runs)

        return print(about.version_text(verbose=bool({"-v", "--verbose"} & set(args))))
    verb, overrides = args[0], args[1:]
    if verb == TOKENIZE:
        verb, overrides = "launch", [*overrides, f"job={Job.tokenize.value}"]
    if verb in VERBS and {"-h", "--help"} & set(overrides):
        from compiler.cli import about

        return print(about.verb_usage(verb, config_dirs(overrides)))
    if verb == "init":
        from compiler.cli import scaffold

        try:
            return scaffold.main(overrides)
        except ConfigError as error:
            _fail(error.one_line())
    if verb in RUN_VERBS:
        from compiler.cli import runs

        try:
            return runs.main(verb, overrides)
        except ConfigError as error:
            _fail(error.one_line())
        except PlatformError as error:
            _fail(error.one_line(), status=PLATFORM_ERROR)
    if verb == CONVERT:
        return _convert(overrides)
    if verb not in VERBS:
        _fail(UnknownNameError("verb", "verb", verb, [*VERBS, TOKENIZE, *RUN_VERBS, CONVERT, "init"]).one_line())
    task = VERBS[verb]
    if verb == "eval":
        try:
            dry_run = ["--dry-run"] if "--dry-run" in overrides else []
            overrides = [*dry_run, *evaluated([o for o in overrides if o != "--dry-run"])]
        except ConfigError as error:
            _fail(error.one_line())
    if verb in ("launch", "eval") and "--dry-run" in overrides:
        task, overrides = tasks.dry_run_task, [o for o in overrides if o != "--dry-run"]
    elif verb == "launch" and "--resume" in overrides:
        try:
            task, overrides = resuming(overrides)
        except ConfigError as error:
            _fail(error.one_line())
    run_app(task, overrides)


def resuming(overrides: list[str]) -> tuple[Callable[[DictConfig], None], list[str]]:
    """`launch --resume RUN [overrides]`: the task of the run's next attempt, and its whole command line
    (the run's overrides, then the new ones)."""
    from compiler.cli import runs
    from compiler.launch.resume import prepare_resume, resume_overrides

    at = overrides.index("--resume")
    if at + 1 >= len(overrides) or "=" in overrides[at + 1]:
        raise ConfigError("--resume", "needs a run", "dockyard launch --resume RUN [overrides]")
    if {"-m", "--multirun"} & set(overrides):
        raise ConfigError("--resume", "resumes one run, not a sweep", "drop -m")
    resume = prepare_resume(runs.find_record(overrides[at + 1]))
    new = overrides[:at] + overrides[at + 2 :]
    return tasks.resume_task(resume), [*resume.overrides, *new, *resume_overrides(resume)]


def evaluated(overrides: list[str]) -> list[str]:
    """`eval RUN [overrides]`: the command line of an evaluation of the run's exported model; without a run
    (`eval model=hf model.path=FOLDER ...`), the overrides as given; either a plan whose job is evaluate."""
    job = f"job={Job.evaluate.value}"
    if not overrides or "=" in overrides[0] or overrides[0].startswith("-"):
        return [*overrides, job]
    from compiler.cli import runs
    from compiler.launch.evaluation import overrides_for_run

    return [*overrides_for_run(runs.find_record(overrides[0]), overrides[1:]), job]


def run_app(task: Callable[[DictConfig], None], overrides: list[str]) -> None:
    """Run `task` as a Hydra app with `overrides` as its command line; user errors exit 2."""
    errors: list[str] = []
    platform_errors: list[str] = []
    task_failed = False

    def guarded(cfg: DictConfig) -> None:
        nonlocal task_failed
        try:
            folders.claim(Path(HydraConfig.get().runtime.output_dir).resolve())
            reject_numbers_in_files(HydraConfig.get(), cfg)
            task(cfg)
        except ConfigError as error:  # reported once Hydra is done, for every point of a sweep
            hydra_cfg = HydraConfig.get()
            point = ""
            if hydra_cfg.mode is RunMode.MULTIRUN:
                point = f"[job {hydra_cfg.job.num}: {' '.join(hydra_cfg.overrides.task)}] "
                folders.discard_point(Path(hydra_cfg.runtime.output_dir), hydra_cfg.output_subdir)
            errors.append(point + error.one_line())
        except PlatformError as error:
            platform_errors.append(error.one_line())
        except Exception:
            task_failed = True
            raise

    guarded.__wrapped__ = task  # how the sweep launcher recognises dockyard's own tasks
    try:
        user_configs = user_config_dir(overrides)
    except ConfigError as error:
        _fail(error.one_line())
    if user_configs is not None:
        overrides = [f"--config-dir={user_configs}", *overrides]
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)(guarded)
    user_wants_traceback = "HYDRA_FULL_ERROR" in os.environ
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line
    folders.start()
    sys.argv = [PROG, *_with_staging(open_maps(overrides))]
    named: dict[str, str] = {}
    """The folders Hydra makes that the user named (`hydra.run.dir=...`), as given."""
    flags: argparse.Namespace | None = None
    try:
        flags = _check_flags(sys.argv[1:])
        for folder in (flags.config_dir, flags.config_path):
            if folder is not None and Path(folder).is_dir():
                reject_alias_bombs(Path(folder))
        for override in overrides:
            key, _, folder = override.partition("=")
            if key in folders.FOLDER_KEYS:
                folders.check_folder(key, folder)
            if key in folders.MADE_BY_HYDRA:
                named[key] = _value(override)
            if key == "hydra.run.dir":
                folders.expect(named[key])
        check_overrides([o for o in overrides if ("=" in o or o.startswith("~")) and not o.startswith("-")])
        if single_run.is_single_run(flags):
            single_run.run(guarded, flags, str(CONF_DIR), CONFIG_NAME)
        else:
            app()
    except PointFailedError as exc:  # a sweep's job failed: the others ran, the summary says how
        for failure in (exc, *exc.also):
            print(f"{PROG}: error: {failure}", file=sys.stderr)
        sys.exit(1)
    except (HydraException, OmegaConfBaseException, ValueError, OverflowError, ConfigError, yaml.YAMLError) as exc:
        if user_wants_traceback or task_failed:  # a bug in dockyard, not a user's mistake
            raise
        error = as_config_error(exc)
        errors += [error.one_line(), *(error.points if isinstance(error, InvalidSweepError) else ())]
    except OSError as exc:  # Hydra could not make the folder the user named, here or in a config file
        if not named and flags is not None:
            named = folders.configured(flags.overrides, config_dirs(overrides), flags.multirun)
        refusals = (folders.creation_error(key, folder, exc) for key, folder in named.items())
        refusal = next((r for r in refusals if r is not None), None)
        if user_wants_traceback or task_failed or refusal is None:
            raise
        errors.append(refusal.one_line())
    finally:
        folders.discard()
        if not user_wants_traceback:
            del os.environ["HYDRA_FULL_ERROR"]
    if errors:
        _fail(*errors)
    if platform_errors:
        _fail(*platform_errors, status=PLATFORM_ERROR)


def _check_flags(args: list[str]) -> argparse.Namespace:
    """Hydra's own parser prints its whole usage (8 lines) for a flag it does not know, or for overrides after
    a flag: the same parser is run first, and its error is one line naming the word."""
    parser = get_args_parser()

    def error(message: str) -> NoReturn:
        unknown = message.partition("unrecognized arguments: ")[2].split()
        if unknown and not unknown[0].startswith("-"):
            raise ConfigError("overrides", message, "give the flags (-m, --cfg, ...) before the overrides")
        raise ConfigError("overrides", message, f"`{PROG} plan --help` lists the flags")

    parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(args)


def _value(override: str) -> str:
    """An override's value as Hydra reads it (quotes taken off; interpolations left for Hydra to resolve)."""
    try:
        return str(OverridesParser.create().parse_overrides([override])[0].value())
    except OverrideParseException:  # Hydra reports it
        return override.partition("=")[2]


def _with_staging(overrides: list[str]) -> list[str]:
    """The command line with the staging override among the user's overrides (argparse takes them as one
    run of words), or first where there are none, so that a bare `--info` at the end takes no value from it."""
    at = next((i for i, word in enumerate(overrides) if "=" in word and not word.startswith("-")), 0)
    return [*overrides[:at], *_staging(overrides), *overrides[at:]]


def _staging(overrides: list[str]) -> list[str]:
    """Hydra's `.hydra` files go to this invocation's staging folder (see `compiler.cli.folders`); a sweep
    writes each point's own, and a user's `hydra.output_subdir` is theirs."""
    sweep = {"-m", "--multirun"} & set(overrides) or any(o.startswith("hydra.mode=") for o in overrides)
    if sweep or any(o.lstrip("+").startswith("hydra.output_subdir=") for o in overrides):
        return []
    return [folders.staging_override()]


def _convert(args: list[str]) -> None:
    usage = f"usage: {PROG} convert RECIPE   (a TrainingArguments JSON, a TRL config or an axolotl YAML)"
    if args in (["-h"], ["--help"]):
        return print(usage)
    if len(args) != 1 or args[0].startswith("-"):
        _fail(usage)
    from compiler.config import recipes

    try:
        status = recipes.print_conversion(Path(args[0]))
    except ConfigError as error:
        _fail(error.one_line())
    sys.exit(status)


def _fail(*errors: str, status: int = USER_ERROR) -> None:
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    sys.exit(status)


def _complete(args: list[str]) -> None:
    """Shell completion: verbs for the first word, Hydra's own completion after a verb."""
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if "query" in " ".join(args) and (len(words) < 2 or (len(words) == 2 and not line.endswith(" "))):
        typed = words[1] if len(words) == 2 else ""
        print(" ".join(v for v in VERBS if v.startswith(typed)))
        return
    if len(words) > 1 and words[1] in VERBS:
        os.environ["COMP_LINE"] = line.replace(f" {words[1]}", "", 1)
    run_app(next(iter(VERBS.values())), args)


def usage() -> str:
    return (
        f"usage: {PROG} VERB [hydra overrides and flags...]    {PROG} --version [-v]\n\n"
        "verbs:\n  plan    compile the config into a validated plan.json and print its summary\n"
        "  build   plan, then build the plan's content-addressed image (and push it with image.push=true)\n"
        "  launch  build, then run the plan on its target (--dry-run: print the request, do nothing;\n"
        "          --resume RUN [overrides]: continue a run from its newest checkpoint)\n"
        "  eval    [RUN] eval.tasks=[...]: evaluate a run's exported model (or model.path) with\n"
        "          lm-evaluation-harness as a job on the plan's target (--dry-run: print the request)\n"
        "  tokenize  launch a job that fills the token cache (data.cache), its nodes splitting the documents\n"
        "  runs                     the launched runs, newest first (--status, --target, --limit, -o json)\n"
        "  status, logs, stop RUN   a launched run, by its id (from any folder) or its folder\n"
        "  warm-pool release RUN    end the warm pool a SageMaker run keeps (keep-alive to 0)\n"
        "  convert RECIPE           a TrainingArguments JSON, TRL config or axolotl YAML as overrides\n"
        "  init [FOLDER]            a project of your own: conf/ (searched before dockyard's), train.py\n\n"
        f"examples:\n  {PROG} plan experiment=llama3-8b-p5x4 parallelism.tp=2\n"
        f"  {PROG} build experiment=smoke image.push=true image.registry=127.0.0.1:5000\n"
        f"  {PROG} launch experiment=smoke          (train on two local container nodes)\n"
        f"  {PROG} plan --cfg job          (the composed config)\n"
        f"  {PROG} plan --help             (the flags and config groups; --hydra-help: Hydra's)\n"
        f'  eval "$({PROG} plan -sc install=bash)"   (shell completion)'
    )
