"""`dockyard VERB [hydra overrides...]`.

Each verb is a Hydra app over the same `conf/`, so every Hydra flag works after the verb (`-m`,
`--cfg job`, `--info`, `-cn`/`-cd`, shell completion). Hydra's compose errors and dockyard's own
`ConfigError`s end the same way: one line on stderr, exit status 2, nothing left behind.
"""

import os
import sys
from collections.abc import Callable

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from compiler.cli import about, folders, runs, tasks
from compiler.config.compose import (
    CONF_DIR,
    CONFIG_NAME,
    as_config_error,
    check_overrides,
    reject_numbers_in_files,
)
from compiler.launch.errors import InvalidSweepError, PointFailedError
from compiler.launch.resume import prepare_resume, resume_overrides
from compiler.spec.errors import ConfigError, UnknownNameError

folders.register()
PROG = "dockyard"
USER_ERROR = 2
VERBS: dict[str, Callable[[DictConfig], None]] = {
    "plan": tasks.plan_task,
    "build": tasks.build_task,
    "launch": tasks.launch_task,
}
RUN_VERBS = ("runs", "status", "logs", "stop", "warm-pool")
"""Verbs about launched runs (the list, or one by id or folder); they compose no config."""


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-sc"], ["--shell-completion"]):
        return _complete(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if args else USER_ERROR)
    if "--version" in args[:2] or "-V" in args[:2]:
        return print(about.version_text(verbose=bool({"-v", "--verbose"} & set(args))))
    verb, overrides = args[0], args[1:]
    if verb in VERBS and {"-h", "--help"} & set(overrides):
        return print(about.verb_usage(verb, CONF_DIR))
    if verb in RUN_VERBS:
        try:
            return runs.main(verb, overrides)
        except ConfigError as error:
            _fail(error.one_line())
    if verb not in VERBS:
        _fail(UnknownNameError("verb", "verb", verb, [*VERBS, *RUN_VERBS]).one_line())
    task = VERBS[verb]
    if verb == "launch" and "--dry-run" in overrides:
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
    at = overrides.index("--resume")
    if at + 1 >= len(overrides) or "=" in overrides[at + 1]:
        raise ConfigError("--resume", "needs a run", "dockyard launch --resume RUN [overrides]")
    if {"-m", "--multirun"} & set(overrides):
        raise ConfigError("--resume", "resumes one run, not a sweep", "drop -m")
    resume = prepare_resume(runs.find_record(overrides[at + 1]))
    new = overrides[:at] + overrides[at + 2 :]
    return tasks.resume_task(resume), [*resume.overrides, *new, *resume_overrides(resume)]


def run_app(task: Callable[[DictConfig], None], overrides: list[str]) -> None:
    """Run `task` as a Hydra app with `overrides` as its command line; user errors exit 2."""
    errors: list[str] = []
    task_failed = False

    def guarded(cfg: DictConfig) -> None:
        nonlocal task_failed
        try:
            reject_numbers_in_files(HydraConfig.get(), cfg)
            task(cfg)
        except ConfigError as error:  # reported once Hydra is done, for every point of a sweep
            hydra_cfg = HydraConfig.get()
            point = ""
            if hydra_cfg.mode is RunMode.MULTIRUN:
                point = f"[job {hydra_cfg.job.num}: {' '.join(hydra_cfg.overrides.task)}] "
            errors.append(point + error.one_line())
        except Exception:
            task_failed = True
            raise

    guarded.__wrapped__ = task  # how the sweep launcher recognises dockyard's own tasks
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)(guarded)
    user_wants_traceback = "HYDRA_FULL_ERROR" in os.environ
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line
    folders.start()
    sys.argv = [PROG, *_with_staging(overrides)]
    try:
        for key, _, folder in (override.partition("=") for override in overrides):
            if key in folders.FOLDER_KEYS:
                folders.check_folder(key, folder)
            if key == "hydra.run.dir":
                folders.expect(folder)
        check_overrides([o for o in overrides if ("=" in o or o.startswith("~")) and not o.startswith("-")])
        app()
    except PointFailedError as exc:  # a sweep's job failed: the others ran, the summary says how
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except (HydraException, OmegaConfBaseException, ValueError, OverflowError, ConfigError, yaml.YAMLError) as exc:
        if user_wants_traceback or task_failed:  # a bug in dockyard, not a user's mistake
            raise
        error = as_config_error(exc)
        errors += [error.one_line(), *(error.points if isinstance(error, InvalidSweepError) else ())]
    finally:
        folders.discard()
        if not user_wants_traceback:
            del os.environ["HYDRA_FULL_ERROR"]
    if errors:
        _fail(*errors)


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


def _fail(*errors: str) -> None:
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    sys.exit(USER_ERROR)


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
        "  runs                     the launched runs, newest first (--status, --target, --limit, -o json)\n"
        "  status, logs, stop RUN   a launched run, by its id (from any folder) or its folder\n"
        "  warm-pool release RUN    end the warm pool a SageMaker run keeps (keep-alive to 0)\n\n"
        f"examples:\n  {PROG} plan experiment=llama3-8b-p5x4 parallelism.tp=2\n"
        f"  {PROG} build experiment=smoke image.push=true image.registry=127.0.0.1:5000\n"
        f"  {PROG} launch experiment=smoke          (train on two local container nodes)\n"
        f"  {PROG} plan --cfg job          (the composed config)\n"
        f"  {PROG} plan --help             (the flags and config groups; --hydra-help: Hydra's)\n"
        f'  eval "$({PROG} plan -sc install=bash)"   (shell completion)'
    )
