"""`dockyard --version` and `dockyard plan|build|launch --help`: dockyard's own words first; Hydra's help
stays one flag away (`--hydra-help`)."""

import dataclasses
from importlib import metadata
from pathlib import Path

from compiler.images.render import CONSTRAINTS
from compiler.spec.schema import ImageConfig

PROG = "dockyard"
VERSIONS_SHOWN = ("hydra-core", "omegaconf", "torch", "docker", "boto3", "kubernetes")
"""What `--version -v` names besides dockyard: what composes the config, trains, and reaches each target."""

PURPOSES = {
    "plan": "compile the config into a validated plan.json and report.md, and print the plan's summary",
    "build": "plan, then build the plan's content-addressed image (push it with image.push=true)",
    "launch": "build, then run the plan on its target and follow it (a run id for dockyard status|logs|stop)",
    "eval": "evaluate a run's exported model (eval RUN) or model.path with lm-evaluation-harness's eval.tasks, as a "
    "job on the plan's target, and print the scores",
}
DRY_RUN_VERBS = ("launch", "eval")


def version_text(*, verbose: bool) -> str:
    lines = [f"{PROG} {_version(PROG)}"]
    if verbose:  # read from the installed metadata: torch is never imported on the host
        lines += [f"  {name} {_version(name)}" for name in VERSIONS_SHOWN]
        lines += image_pins()
    return "\n".join(lines)


def image_pins() -> list[str]:
    """What the images this dockyard builds install: the `image.<name>` defaults, and the versions of what
    they pull in (the package's constraints file)."""
    pins = [
        f"{field.name} {field.default}"
        for field in dataclasses.fields(ImageConfig)
        if isinstance(field.default, str) and field.default[:1].isdigit()
    ]
    constrained = [line for line in CONSTRAINTS.read_text().splitlines() if "==" in line and not line.startswith("#")]
    return [
        f"  image pins (image.<name>): {', '.join(pins)}",
        f"    and {len(constrained)} versions of what they pull in: {CONSTRAINTS}",
    ]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def config_groups(conf_dirs: list[Path]) -> list[str]:
    """`group: option, option, ...` for each group of the config folders the user picks from (theirs and
    dockyard's together)."""
    options: dict[str, set[str]] = {}
    for conf_dir in conf_dirs:
        for group in conf_dir.iterdir():
            found = {option.stem for option in group.glob("*.yaml")} if group.is_dir() else set()
            if found:
                options.setdefault(group.name, set()).update(found)
    return [f"  {group}: {', '.join(sorted(options[group]))}" for group in sorted(options)]


def verb_usage(verb: str, conf_dirs: list[Path]) -> str:
    dry_run = "[RUN] [--dry-run] " if verb == "eval" else "[--dry-run] " if verb in DRY_RUN_VERBS else ""
    lines = [
        f"usage: {PROG} {verb} {dry_run}[-m] [group=option ...] [key=value ...] [Hydra flags]",
        "",
        f"{PURPOSES[verb]}.",
        "",
        "flags:",
        *(
            ["  --dry-run       print the plan's summary and warnings (stderr), then the exact request (stdout);"]
            + ["                  build nothing, start nothing"]
            if verb in DRY_RUN_VERBS
            else []
        ),
        "  -m, --multirun  one run per combination of comma-separated values (model=tiny,gpt2-124m);",
        "                  dockyard's launcher checks every point first and builds each image once",
        "                  (hydra/launcher=basic: Hydra's own launcher)",
        "  --cfg job       print the composed config (every key with its value) instead of running",
        "  --info          where the config came from (search path, defaults)",
        "  -cd DIR         add a folder of your own configs (experiment/mine.yaml), -cn NAME its primary",
        "  --hydra-help    Hydra's own help",
        "",
        "config groups (group=option):",
        *config_groups(conf_dirs),
        "",
        "keys: any key of the composed config as key=value (trainer.steps=200 parallelism.tp=2);",
        "  each is documented on its field in compiler/spec/schema/<group>.py; --cfg job shows them all",
        "",
        "examples:",
        f"  {PROG} {verb} experiment=llama3-8b-p5x4 parallelism.tp=2",
        f"  {PROG} {verb} -m trainer.lr=1e-4,3e-4",
    ]
    return "\n".join(lines)
