"""The build context: every file the Dockerfile reads, and the content hash that names the image.

The context is assembled from three places rather than from one folder: the torch wheel from the
wheelhouse (cpu_local), dockyard's own package sources, and the user's `trainer.source_dir` less what
its `.dockerignore` excludes. It is sent to Docker as a tar whose entries carry no owner or time, so the
same files always make the same layers; the tag hashes the Dockerfile and each file's path, mode and
content, so any change that could change the image changes its tag, and nothing else does.
"""

import configparser
import hashlib
import io
import os
import shlex
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO

from docker.utils.build import exclude_paths

from compiler.images import PACKAGES_ROOT
from compiler.images.digests import file_sha256
from compiler.images.render import (
    CONSTRAINTS,
    EVAL_CONSTRAINTS,
    has_eval_adapter,
    has_eval_tasks,
    has_user_code,
    render_dockerfile,
    uses_constraints,
)
from compiler.spec import Plan, schema
from compiler.spec.errors import ConfigError

RUNTIME_SOURCES = ("compiler/__init__.py", "compiler/spec", "entrypoint")
"""What the image runs of dockyard: the entrypoint and the Plan's types (`compiler.spec`), nothing else. Only
their Python modules are taken, the files a wheel installs, so an installed dockyard and a checkout (whose
folders may hold other files) give the same image."""
ALWAYS_IGNORED = (".git", "**/__pycache__", "**/*.pyc", "**/.pytest_cache")
"""Ignored in the user's code before its own `.dockerignore` (which can bring them back with `!`)."""
BASE_PYTHON_TAG = "cp311"
"""The CPython of the cpu-local base (Debian bookworm's python3)."""
TAG_LENGTH = 20


@dataclass(frozen=True)
class BuildContext:
    dockerfile: str
    files: dict[str, Path]
    """Path inside the context → the file on this machine."""
    base_id: str = ""
    """The engine's id of the FROM image: a base remade or re-pulled under the same name is new content."""

    @cached_property
    def content_hash(self) -> str:
        """sha256 over the base's id, the Dockerfile and every file's path, mode and content, in path order."""
        digest = hashlib.sha256(f"{self.base_id}\0Dockerfile\0{self.dockerfile}\0".encode())
        for name in sorted(self.files):
            source = self.files[name]
            digest.update(f"{name}\0{_mode(source):o}\0{file_sha256(source)}\0".encode())
        return digest.hexdigest()

    @property
    def tag(self) -> str:
        return self.content_hash[:TAG_LENGTH]

    def write_tar(self, out: IO[bytes]) -> None:
        """The context as Docker's build API takes it, with parent folders and normalised metadata."""
        with tarfile.open(fileobj=out, mode="w") as tar:
            dockerfile = self.dockerfile.encode()
            _add(tar, "Dockerfile", io.BytesIO(dockerfile), len(dockerfile), 0o644)
            for folder in sorted({str(p) for name in self.files for p in Path(name).parents if str(p) != "."}):
                info = tarfile.TarInfo(folder)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for name in sorted(self.files):
                source = self.files[name]
                with source.open("rb") as file:
                    _add(tar, name, file, source.stat().st_size, _mode(source))


def context_inputs(plan: Plan) -> str:
    """All that `build_context` reads of the plan: plans with the same inputs get the same context while the
    files they name stay as they are (a sweep hashes the context once per distinct value, not per point)."""
    trainer = plan.trainer
    return repr((render_dockerfile(plan), plan.image, trainer.entry, trainer.source_dir, trainer.script, plan.eval))


def build_context(plan: Plan, *, cwd: Path, base_id: str = "") -> BuildContext:
    """Everything a build of `plan` reads. `cwd` anchors a relative `trainer.source_dir`."""
    files = dict(_dockyard_files())
    if uses_constraints(plan.image):
        files["constraints.txt"] = CONSTRAINTS
        if plan.eval is not None:
            files["eval-constraints.txt"] = EVAL_CONSTRAINTS
    if plan.image.family is schema.ImageFamily.cpu_local:
        wheel = find_torch_wheel(plan.image, wheelhouse_folders(plan.image))
        files[f"wheelhouse/{wheel.name}"] = wheel
    if has_user_code(plan):
        code = user_code_files(cwd / plan.trainer.source_dir)
        if f"code/{plan.trainer.script}" not in code:
            raise ConfigError(
                "trainer.script",
                f"'{plan.trainer.script}' is not a file in {plan.trainer.source_dir} (or .dockerignore leaves it out)",
                "give its path relative to trainer.source_dir",
            )
        files.update(code)
    if plan.eval is not None and has_eval_tasks(plan):  # read where the planner checked it, as data.path is
        files.update(folder_files("eval_tasks", Path(plan.eval.include_path)))
    if plan.eval is not None and has_eval_adapter(plan):
        files.update(folder_files("eval_adapter", Path(plan.eval.adapter)))
    return BuildContext(render_dockerfile(plan), files, base_id)


def wheelhouse_folders(image: schema.ImageConfig) -> list[Path]:
    """`image.wheelhouse`, or else the find-links of pip's environment and configuration files."""
    if image.wheelhouse:
        return [Path(folder).expanduser() for folder in image.wheelhouse]
    links = shlex.split(os.environ.get("PIP_FIND_LINKS", ""))
    parser = configparser.ConfigParser()
    parser.read(_pip_config_files())
    for section in ("global", "install"):
        links += parser.get(section, "find-links", fallback="").split()
    return [Path(link.removeprefix("file://")) for link in links if "://" not in link or link.startswith("file://")]


def _pip_config_files() -> list[Path]:
    """pip's configuration files, lowest priority first (site-wide, per user, $PIP_CONFIG_FILE)."""
    dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(dirs)] + [Path("/etc/pip.conf")]
    files += [Path.home() / ".pip" / "pip.conf", Path.home() / ".config" / "pip" / "pip.conf"]
    if "PIP_CONFIG_FILE" in os.environ:
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def find_torch_wheel(image: schema.ImageConfig, folders: Iterable[Path]) -> Path:
    folders = list(folders)
    pattern = f"torch-{image.torch}+cpu-{BASE_PYTHON_TAG}-{BASE_PYTHON_TAG}-*linux*_x86_64.whl"
    for folder in folders:
        found = sorted(folder.glob(pattern))
        if found:
            return found[-1]
    searched = ", ".join(str(f) for f in folders) or "no folder (pip names no find-links)"
    raise ConfigError(
        "image.wheelhouse",
        f"no {pattern} in {searched}",
        "put the CPU torch wheel in one of them, or set image.wheelhouse=[FOLDER,...]",
    )


def _dockyard_files() -> Iterable[tuple[str, Path]]:
    for name in RUNTIME_SOURCES:
        path = PACKAGES_ROOT / name
        if path.is_file():
            yield f"dockyard/{name}", path
        elif path.is_dir():
            for file in sorted(path.rglob("*.py")):
                if file.is_file() and "__pycache__" not in file.parts:
                    yield f"dockyard/{file.relative_to(PACKAGES_ROOT)}", file


def user_code_files(source_dir: Path) -> dict[str, Path]:
    """The files of `trainer.source_dir` that its `.dockerignore` (Docker's own syntax) lets through."""
    if not source_dir.is_dir():
        raise ConfigError("trainer.source_dir", f"'{source_dir}' is not a folder", "point it at your training code")
    patterns = list(ALWAYS_IGNORED)
    ignore_file = source_dir / ".dockerignore"
    if ignore_file.is_file():
        lines = (line.strip() for line in ignore_file.read_text().splitlines())
        patterns += [line for line in lines if line and not line.startswith("#")]
    kept = exclude_paths(str(source_dir), patterns, dockerfile=".dockerignore")
    return {f"code/{name}": source_dir / name for name in sorted(kept) if (source_dir / name).is_file()}


def folder_files(prefix: str, folder: Path) -> dict[str, Path]:
    """Every file of a folder the image carries under `prefix` (`eval.include_path`: the task YAMLs and the data
    files they name; `eval.adapter`)."""
    return {f"{prefix}/{path.relative_to(folder)}": path for path in sorted(folder.rglob("*")) if path.is_file()}


def code_commit(source_dir: Path) -> str | None:
    """The git commit of the user's code (with `-dirty` if it has uncommitted changes), if it is in git."""

    def git(*args: str) -> str | None:
        result = subprocess.run(["git", "-C", str(source_dir), *args], capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    return f"{commit}-dirty" if git("status", "--porcelain", "--", ".") else commit


def _mode(path: Path) -> int:
    return 0o755 if os.access(path, os.X_OK) else 0o644


def _add(tar: tarfile.TarFile, name: str, file: IO[bytes], size: int, mode: int) -> None:
    """One file entry owned by root with time 0: the layer it makes depends on its content alone."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, mode
    tar.addfile(info, file)
