"""`dockyard VERB [hydra overrides...]`.

Each verb is a Hydra app over the same `conf/`, so every Hydra flag works after the verb (`-m`,
`--cfg job`, `--info`, `-cn`/`-cd`, shell completion). Hydra's compose errors and dockyard's own
`ConfigError`s end the same way: one line on stderr, exit status 2, nothing left behind.
"""

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from compiler.compose import CONF_DIR, CONFIG_NAME, as_config_error, to_config
from compiler.errors import ConfigError, UnknownNameError
from compiler.plan import Plan, compile_plan
from compiler.summary import report_markdown, summary_lines

PROG = "dockyard"
USER_ERROR = 2
PLAN_FILE = "plan.json"
REPORT_FILE = "report.md"


def plan_command(cfg: DictConfig) -> None:
    """Compile the config into a plan, print its summary, write plan.json and report.md to the run folder."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    with discarded_on_error(run_dir):
        plan = compile_plan(to_config(cfg))
    path = run_dir / PLAN_FILE
    path.write_text(plan.to_json(indent=2) + "\n")
    (run_dir / REPORT_FILE).write_text(report_markdown(plan))
    print("\n".join(summary_lines(plan)))
    print(f"wrote     {path} and {REPORT_FILE}")


def build_command(cfg: DictConfig) -> None:
    """`plan`, then build the plan's image (nothing when its content hash is built), push it if asked."""
    from compiler.images.workflow import build_and_record  # the Docker SDK only for this verb

    plan_command(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    build_and_record(Plan.from_json((run_dir / PLAN_FILE).read_text()), run_dir, cwd=Path.cwd())


VERBS: dict[str, Callable[[DictConfig], None]] = {"plan": plan_command, "build": build_command}


@contextmanager
def discarded_on_error(run_dir: Path) -> Iterator[None]:
    """On a ConfigError, remove what Hydra wrote for this run (its .hydra folder, empty folders)."""
    try:
        yield
    except ConfigError:
        shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
        cwd = Path.cwd().resolve()
        folder = run_dir.resolve()
        while folder != cwd and cwd in folder.parents and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
        raise


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-sc"], ["--shell-completion"]):
        return _complete(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if args else USER_ERROR)
    verb, overrides = args[0], args[1:]
    if verb not in VERBS:
        _fail(UnknownNameError("verb", "verb", verb, VERBS).one_line())
    run_app(VERBS[verb], overrides)


def run_app(task: Callable[[DictConfig], None], overrides: list[str]) -> None:
    """Run `task` as a Hydra app with `overrides` as its command line; user errors exit 2."""
    errors: list[str] = []
    task_failed = False

    def guarded(cfg: DictConfig) -> None:
        nonlocal task_failed
        try:
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

    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)(guarded)
    user_wants_traceback = "HYDRA_FULL_ERROR" in os.environ
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line
    sys.argv = [PROG, *overrides]
    try:
        app()
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        if user_wants_traceback or task_failed:  # a bug in dockyard, not a user's mistake
            raise
        errors.append(as_config_error(exc).one_line())
    finally:
        if not user_wants_traceback:
            del os.environ["HYDRA_FULL_ERROR"]
    if errors:
        _fail(*errors)


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
        f"usage: {PROG} VERB [hydra overrides and flags...]\n\n"
        "verbs:\n  plan   compile the config into a validated plan.json and print its summary\n"
        "  build  plan, then build the plan's content-addressed image (and push it with image.push=true)\n\n"
        f"examples:\n  {PROG} plan experiment=llama3-8b-p5x4 parallelism.tp=2\n"
        f"  {PROG} build experiment=smoke image.push=true image.registry=127.0.0.1:5000\n"
        f"  {PROG} plan --cfg job          (the composed config)\n"
        f"  {PROG} plan --help             (config groups and Hydra flags)\n"
        f'  eval "$({PROG} plan -sc install=bash)"   (shell completion)'
    )
