"""What `dockyard build` does after compiling: build (or find) the image, push it if asked, record it.

The record, image.json, lies next to plan.json in the run folder: the reference the build made and,
once pushed, the digest reference that launches should use.
"""

import dataclasses
import sys
import time
from pathlib import Path
from typing import IO

from compiler.images.build import BuiltImage, build_image, docker_client
from compiler.images.push import push_image
from compiler.spec import Plan

IMAGE_FILE = "image.json"


def build_and_record(
    plan: Plan, run_dir: Path, *, cwd: Path, out: IO[str] = sys.stdout, stage: Path | None = None
) -> BuiltImage:
    """Build (or find) and push the plan's image; image.json is written into `stage` (a command's staging
    folder, see `compiler.cli.folders`) when given, bound for `run_dir`."""
    start = time.monotonic()
    client = docker_client()
    built = build_image(plan, client, cwd=cwd, out=out)
    if built.built:
        layers = [step for step in built.steps_run if step.instruction.split()[0].upper() in ("RUN", "COPY", "ADD")]
        done = f"built {len(layers)} layer(s), {len(built.steps) - len(built.steps_run)} step(s) from cache"
    else:
        done = "already built, nothing to do"
    print(f"image     {built.reference}  ({done}, {time.monotonic() - start:.1f} s)", file=out)
    if plan.image.push:
        built = dataclasses.replace(built, digest=push_image(client, built, plan.image, out))
        print(f"pushed    {built.digest}", file=out)
    ((stage or run_dir) / IMAGE_FILE).write_text(built.to_json() + "\n")
    print(f"wrote     {run_dir / IMAGE_FILE}", file=out)
    return built
