"""`dockyard --version` and `dockyard plan|build|launch --help`: dockyard's own words first; Hydra's help
stays one flag away (`--hydra-help`)."""

from importlib import metadata
from pathlib import Path

PROG = "dockyard"
VERSIONS_SHOWN = ("hydra-core", "omegaconf", "torch", "docker", "boto3", "kubernetes")
"""What `--version -v` names besides dockyard: what composes the config, trains, and reaches each target."""

PURPOSES = {
    "plan": "compile the config into a validated plan.json and report.md, and print the plan's summary",
    "build": "plan, then build the plan's content-addressed image (push it with image.push=true)",
    "launch": "build, then run the plan on its target and follow it (a run id for dockyard status|logs|stop)",
}


def version_text(*, verbose: bool) -> str:
    lines = [f"{PROG} {_version(PROG)}"]
    if verbose:  # read from the installed metadata: torch is never imported on the host
        lines += [f"  {name} {_version(name)}" for name in VERSIONS_SHOWN]
    return "\n".join(lines)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def config_groups(conf_dir: Path) -> list[str]:
    """`group: option, option, ...` for each folder of the config tree the user picks from."""
    return [
        f"  {group.name}: {', '.join(sorted(option.stem for option in group.glob('*.yaml')))}"
        for group in sorted(conf_dir.iterdir())
        if group.is_dir() and any(group.glob("*.yaml"))
    ]


def verb_usage(verb: str, conf_dir: Path) -> str:
    dry_run = "[--dry-run] " if verb == "launch" else ""
    lines = [
        f"usage: {PROG} {verb} {dry_run}[-m] [group=option ...] [key=value ...] [Hydra flags]",
        "",
        f"{PURPOSES[verb]}.",
        "",
        "flags:",
        *(
            ["  --dry-run       print the plan's summary and warnings (stderr), then the exact request (stdout);"]
            + ["                  build nothing, start nothing"]
            if verb == "launch"
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
        *config_groups(conf_dir),
        "",
        "keys: any key of the composed config as key=value (trainer.steps=200 parallelism.tp=2);",
        "  each is documented on its field in compiler/spec/schema/<group>.py; --cfg job shows them all",
        "",
        "examples:",
        f"  {PROG} {verb} experiment=llama3-8b-p5x4 parallelism.tp=2",
        f"  {PROG} {verb} -m trainer.lr=1e-4,3e-4",
    ]
    return "\n".join(lines)
