"""Build a plan's image through the Docker SDK, or find that it is already built.

The tag is the context's content hash, so an existing tag means an identical image: nothing is sent
and nothing is built. Otherwise the legacy builder's step log streams to the terminal as it runs, and
is parsed into which steps ran and which came from the layer cache (tests assert on that).
"""

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import IO

import docker
from docker.errors import DockerException, ImageNotFound

from compiler.core.terminal import is_terminal, plain
from compiler.images import PACKAGE_DIR
from compiler.images.context import BuildContext, build_context, code_commit
from compiler.images.render import has_user_code
from compiler.spec import Plan, schema
from compiler.spec.errors import ConfigError

LOCAL_BASE = "dockyard/base:bookworm-py311"
"""The cpu-local base that `make-base` (this package's script) makes here when the engine lacks it."""
MAKE_BASE = PACKAGE_DIR / "make-base"


class BuildError(ConfigError):
    """A build that cannot start or that fails; reported like every user error (one line, exit 2)."""


@dataclass(frozen=True)
class Step:
    number: int
    instruction: str
    cached: bool
    """Taken from the layer cache (or FROM, which runs nothing): not built in this run."""


@dataclass(frozen=True)
class BuiltImage:
    reference: str
    """repository:content-hash"""
    id: str
    built: bool
    """False when the tag already existed and nothing was sent to the engine."""
    steps: tuple[Step, ...] = ()
    digest: str | None = None
    """registry/repository@sha256:..., once pushed."""

    @property
    def steps_run(self) -> list[Step]:
        return [step for step in self.steps if not step.cached]

    def to_json(self) -> str:
        record = {"reference": self.reference, "id": self.id, "digest": self.digest, "built": self.built}
        record["steps_run"] = [asdict(step) for step in self.steps_run]
        return json.dumps(record, indent=2)


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        raise BuildError(
            "docker", f"cannot reach the Docker engine ({exc.__class__.__name__})", "start one: scripts/ensure-docker"
        ) from None
    return client


def image_reference(plan: Plan, context: BuildContext) -> str:
    return f"{plan.image.name}:{context.tag}"


def planned_reference(plan: Plan, *, cwd: Path) -> str:
    """The reference `build_image` would give the plan's image, building and pulling nothing (dry runs).
    The tag covers the base's id: that of the engine's copy, or '' where there is no engine or no copy yet
    (then the build, which makes or pulls the base first, tags differently)."""
    try:
        base = _find(docker_client(), plan.image.base)
    except BuildError:
        base = None
    return image_reference(plan, build_context(plan, cwd=cwd, base_id=base.id if base else ""))


def build_image(
    plan: Plan, client: docker.DockerClient, *, cwd: Path, out: IO[str] = sys.stdout, use_cache: bool = True
) -> BuiltImage:
    """The plan's image, built unless its content-addressed tag is already in the engine.

    `use_cache=False` builds every step again, even for an existing tag (a cold build, for benchmarks).
    """
    base_id = ensure_base_image(client, plan.image, out)
    context = build_context(plan, cwd=cwd, base_id=base_id)
    reference = image_reference(plan, context)
    existing = _find(client, reference) if use_cache else None
    if existing is not None:
        return BuiltImage(reference, existing.id, built=False)
    steps = send_build(client, context, reference, out, labels=image_labels(plan, cwd), nocache=not use_cache)
    return BuiltImage(reference, client.images.get(reference).id, built=True, steps=steps)


def send_build(
    client: docker.DockerClient, context: BuildContext, reference: str, out: IO[str], **options
) -> tuple[Step, ...]:
    """Send `context` to the engine and build it as `reference` with host networking (no bridge is needed,
    and builds reach the package indexes the host reaches); `options` go to the build API."""
    with tempfile.TemporaryFile() as tar:
        context.write_tar(tar)
        tar.seek(0)
        log = client.api.build(
            fileobj=tar,
            custom_context=True,
            tag=reference,
            network_mode="host",
            rm=True,
            forcerm=True,
            decode=True,
            **options,
        )
        return stream_build_log(log, out)


def image_labels(plan: Plan, cwd: Path) -> dict[str, str]:
    """Labels describe the build that made the image: same content, same tag, first build's labels."""
    labels = {"dockyard.plan": plan.content_hash, "dockyard.version": version("dockyard")}
    if has_user_code(plan):
        commit = code_commit(cwd / plan.trainer.source_dir)
        if commit:
            labels["dockyard.code-commit"] = commit
    return labels


def ensure_base_image(client: docker.DockerClient, image: schema.ImageConfig, out: IO[str]) -> str:
    """The base's id in the engine, after making (cpu_local) or pulling (cuda, dlc) it when it is missing."""
    found = _find(client, image.base)
    if found is not None:
        return found.id
    if image.family is not schema.ImageFamily.cpu_local:
        print(f"base      pulling {image.base}", file=out)
        try:
            return client.images.pull(image.base).id
        except DockerException as exc:
            reason = getattr(exc, "explanation", None) or exc
            raise BuildError(
                "image.base", f"cannot pull '{image.base}': {reason}", "log in to its registry, or docker load it"
            ) from None
    if image.base != LOCAL_BASE:
        raise BuildError(
            "image.base",
            f"'{image.base}' is not in the Docker engine and dockyard makes only {LOCAL_BASE}",
            f"load it (docker load), or use image.base={LOCAL_BASE}",
        )
    print(f"base      {image.base} is missing: making it with {MAKE_BASE} (debootstrap, a minute or two)", file=out)
    result = subprocess.run(
        ["bash", str(MAKE_BASE), image.base], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise BuildError("image.base", f"{MAKE_BASE.name} failed: {last[0]}", "run it by hand to see why")
    return client.images.get(image.base).id


def stream_build_log(log, out: IO[str]) -> tuple[Step, ...]:
    """Print the builder's output as it comes, each step with the time since the start (escape codes and
    redrawn progress bars only on a terminal); parse the steps."""
    start, terminal = time.monotonic(), is_terminal(out)
    steps: list[Step] = []
    current: tuple[int, str] | None = None
    cached = False

    def close() -> None:
        if current is not None:
            steps.append(Step(current[0], current[1], cached or current[1].upper().startswith("FROM ")))

    for chunk in log:
        if "error" in chunk:
            close()
            where = f" at step {current[0]} ({current[1]})" if current else ""
            raise BuildError("image", f"the build failed{where}: {chunk['error'].strip()}", "see the log above")
        text = chunk.get("stream") or (chunk.get("status", "") + "\n" if "status" in chunk else "")
        for line in text.splitlines(keepends=True):
            if line.startswith("Step ") and " : " in line:
                close()
                head, instruction = line.split(" : ", 1)
                current, cached = (int(head.split()[1].split("/")[0]), instruction.strip()), False
                line = f"[{time.monotonic() - start:6.1f}s] {line}"
            elif line.strip() == "---> Using cache":
                cached = True
            out.write(line if terminal else plain(line))
        out.flush()
    close()
    return tuple(steps)


def _find(client: docker.DockerClient, reference: str):
    try:
        return client.images.get(reference)
    except ImageNotFound:
        return None
