"""Image builds against a real Docker engine: run, cache behaviour, secrets, push and pull by digest.

Without an engine these tests skip locally, and fail in CI (CI=true), where `make test` starts one.
The cpu-local base is made once if the engine lacks it; images built here are content-addressed, so
a later session finds them built and checks the same images again without rebuilding.
"""

import io
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from compiler.config.compose import compose_config
from compiler.images.build import BuiltImage, build_image, ensure_base_image
from compiler.images.workflow import build_and_record
from compiler.launch.plan import checked_plan
from tests.helpers import unconstrained_packages
from tests.test_architecture import RUNTIME_IMPORTS

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "AKIADOCKYARDTESTONLY",
    "AWS_SECRET_ACCESS_KEY": "dockyard/test+secret/NOT-A-REAL-KEY-8c1f2",
    "AWS_SESSION_TOKEN": "dockyard-test-session-token-NOT-REAL-5d0e",
}
IGNORED_SECRET = "dockyard-test-ignored-file-content-77a3"
SMOKE = ["experiment=smoke", "trainer=script", "trainer.source_dir=code", "trainer.script=train.py"]
LAYER_STEPS = ("RUN", "COPY", "ADD")


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: code/ with a .dockerignore'd secret file. Its content is the same every session."""
    root = tmp_path_factory.mktemp("project")
    code = root / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("from pkg.model import LAYERS\nprint('training', LAYERS)\n")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "model.py").write_text("LAYERS = 2\n")
    (code / "secrets.txt").write_text(IGNORED_SECRET + "\n")
    (code / ".dockerignore").write_text("secrets.txt\n")
    return root


@pytest.fixture(scope="session")
def smoke(engine: docker.DockerClient, project: Path) -> BuiltImage:
    """The smoke image with user code, built (or found) with AWS credentials in the environment."""
    plan = checked_plan(compose_config(SMOKE))
    ensure_base_image(engine, plan.image, sys.stdout)
    saved = {name: os.environ.get(name) for name in FAKE_AWS}
    os.environ.update(FAKE_AWS)
    try:
        return build_image(plan, engine, cwd=project)
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def run_in(engine: docker.DockerClient, reference: str, *command: str) -> str:
    output = engine.containers.run(reference, list(command), entrypoint=[], remove=True, network_mode="none")
    return output.decode()


def test_every_package_the_image_installs_is_pinned(engine: docker.DockerClient, smoke: BuiltImage) -> None:
    """`images/constraints.txt` promises that a rebuild installs the same packages (botocore once escaped it)."""
    freeze = run_in(engine, smoke.reference, "pip", "freeze")
    assert "botocore==" in freeze and unconstrained_packages(freeze, checked_plan(compose_config(SMOKE))) == []


def test_image_has_the_stack_and_a_user_to_drop_to(engine: docker.DockerClient, smoke: BuiltImage) -> None:
    probe = "import torch, deepspeed, boto3, entrypoint, os; print(torch.__version__, os.getuid())"
    version, uid = run_in(engine, smoke.reference, "python", "-c", probe).split()[-2:]
    assert version == "2.13.0+cpu"
    assert uid == "0", "the image starts as root, as SageMaker expects (tests/test_entrypoint_privileges.py)"
    assert run_in(engine, smoke.reference, "id", "-un", "1000").strip() == "dockyard"
    assert "setpriv from util-linux" in run_in(engine, smoke.reference, "setpriv", "--version")
    assert run_in(engine, smoke.reference, "ls", "-A", "/opt/ml/code").split() == [
        ".dockerignore",
        "pkg",
        "train.py",
    ], "the user's code, less what .dockerignore excludes"
    config = engine.images.get(smoke.reference).attrs["Config"]
    assert config["Entrypoint"] == ["dockyard-entrypoint"]
    plan = checked_plan(compose_config(SMOKE))
    assert config["Labels"]["dockyard.plan"] == plan.content_hash
    assert config["Labels"]["dockyard.version"] == "0.1.0"


def test_the_image_runtime_loads_no_host_side_module(engine: docker.DockerClient, smoke: BuiltImage) -> None:
    """Inside the image, the entrypoint and the trainer import the Plan's types and nothing of the compiler; the
    runtime's modules come compiled (the image's user cannot write `__pycache__` beside them)."""
    assert run_in(engine, smoke.reference, "python", "-c", RUNTIME_IMPORTS).strip() == "[]"
    shipped = run_in(engine, smoke.reference, "ls", "/opt/dockyard", "/opt/dockyard/compiler").split()
    assert set(shipped) == {
        "/opt/dockyard:",
        "compiler",
        "entrypoint",
        "/opt/dockyard/compiler:",
        "__init__.py",
        "__pycache__",
        "spec",
    }
    sources = run_in(engine, smoke.reference, "find", "/opt/dockyard", "-name", "*.py").split()
    compiled = run_in(engine, smoke.reference, "find", "/opt/dockyard", "-name", "*.pyc").split()
    assert len(compiled) == len(sources) > 50


@pytest.mark.timed
def test_nothing_changed_builds_nothing_in_under_a_second(engine: docker.DockerClient, smoke, project) -> None:
    plan = checked_plan(compose_config(SMOKE))
    start = time.monotonic()
    again = build_image(plan, engine, cwd=project, out=io.StringIO())
    elapsed = time.monotonic() - start
    assert (again.reference, again.built, again.steps) == (smoke.reference, False, ())
    assert elapsed < 1.0, f"a no-op build took {elapsed:.2f} s"


def test_a_code_change_rebuilds_only_the_last_layer(engine: docker.DockerClient, smoke, project, tmp_path) -> None:
    changed = tmp_path / "project"
    subprocess.run(["cp", "-a", str(project), str(changed)], check=True)
    # A new value every run, so that this build always has something to do.
    (changed / "code" / "pkg" / "model.py").write_text(f"LAYERS = 2  # {uuid.uuid4()}\n")
    log = io.StringIO()
    rebuilt = build_image(checked_plan(compose_config(SMOKE)), engine, cwd=changed, out=log)
    assert rebuilt.built and rebuilt.reference != smoke.reference
    layers_built = [s.instruction for s in rebuilt.steps_run if s.instruction.split()[0] in LAYER_STEPS]
    assert layers_built == ["COPY --chown=dockyard:dockyard code/ /opt/ml/code/"], log.getvalue()
    assert log.getvalue().count("---> Using cache") >= 10
    engine.images.remove(rebuilt.reference, noprune=True)


def test_no_credentials_in_any_layer(engine: docker.DockerClient, smoke: BuiltImage) -> None:
    """`docker save` holds every layer and the image config (environment, history, labels)."""
    needles = [value.encode() for value in (*FAKE_AWS.values(), IGNORED_SECRET)]
    overlap = max(len(n) for n in needles)
    tail, found, size = b"", set(), 0
    for chunk in engine.images.get(smoke.reference).save(chunk_size=8 << 20):
        window = tail + chunk
        found.update(n for n in needles if n in window)
        tail, size = window[-overlap:], size + len(chunk)
    assert size > 100 << 20, "the saved image should hold all its layers"
    assert not found, f"secrets found in the image: {found}"


def test_push_records_the_digest_and_the_image_pulls_back_by_it(engine, smoke, project, registry, tmp_path) -> None:
    plan = checked_plan(compose_config([*SMOKE, "image.push=true", f"image.registry={registry}"]))
    pushed = build_and_record(plan, tmp_path, cwd=project, out=io.StringIO())
    assert pushed.digest.startswith(f"{registry}/dockyard/smoke@sha256:")
    assert f'"digest": "{pushed.digest}"' in (tmp_path / "image.json").read_text()
    original = engine.images.get(smoke.reference).id
    engine.images.remove(original, force=True, noprune=True)  # every tag and digest, not the cached layers
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(original)
    pulled = engine.images.pull(pushed.digest)
    assert pulled.id == original
    pulled.tag(*smoke.reference.split(":"))  # put the session's image back for the other tests


def dockyard(project: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("dockyard")), "build", *SMOKE, *args]
    return subprocess.run(command, cwd=project, capture_output=True, text=True)


def test_cli_build_records_the_image_next_to_the_plan(smoke: BuiltImage, project: Path, tmp_path: Path) -> None:
    result = dockyard(project, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert f"image     {smoke.reference}  (already built, nothing to do" in result.stdout
    assert (tmp_path / "plan.json").is_file()
    assert f'"reference": "{smoke.reference}"' in (tmp_path / "image.json").read_text()


def test_cli_build_error_is_one_line_and_builds_nothing(smoke: BuiltImage, project: Path, tmp_path: Path) -> None:
    result = dockyard(project, f"image.wheelhouse=[{tmp_path / 'empty'}]", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.startswith("dockyard: error: image.wheelhouse: no torch-2.13.0+cpu-cp311")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "image.json").exists()


DOCUMENT_READERS = """
import datasets, pyarrow, pyarrow.parquet, tokenizers, zstandard, json, pathlib
from compiler.spec.schema import DataFormat
from entrypoint.trainer.data import documents
folder = pathlib.Path("/tmp/docs")
folder.mkdir()
rows = [{"text": f"document {n}"} for n in range(3)]
(folder / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(
    "".join(json.dumps(r) + "\\n" for r in rows).encode()))
pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), folder / "b.parquet")
datasets.Dataset.from_list(rows).save_to_disk(str(folder / "c"))
read = [list(documents.records(p, DataFormat.text, "text")) for p in documents.sources(folder)]
versions = (tokenizers.__version__, datasets.__version__, pyarrow.__version__, zstandard.__version__)
print(*versions, read == [[r["text"] for r in rows]] * 3)
"""


def test_an_image_for_documents_has_the_pinned_readers(engine: docker.DockerClient, smoke: BuiltImage) -> None:
    """The readers' layer (only for plans with data.format text or chat) on the layers the smoke image has too;
    the smoke image has no readers."""
    documents = [
        "experiment=smoke",
        "data=s3",
        "data.uri=s3://dockyard-example-data/docs/",
        "data.format=text",
        "data.tokenizer=s3://dockyard-example-data/tokenizer/",
    ]
    plan = checked_plan(compose_config(documents))
    image = build_image(plan, engine, cwd=Path.cwd())
    assert unconstrained_packages(run_in(engine, image.reference, "pip", "freeze"), plan) == []
    assert run_in(engine, image.reference, "python", "-c", DOCUMENT_READERS).split()[-5:] == [
        "0.23.3",
        "5.2.0",
        "25.0.1",
        "0.25.0",
        "True",
    ]
    with pytest.raises(docker.errors.ContainerError):
        run_in(engine, smoke.reference, "python", "-c", "import tokenizers")
