"""Dockerfiles, build contexts and image rules: everything about images that needs no Docker engine."""

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from compiler.config.compose import compose_config
from compiler.images import context
from compiler.images.context import build_context, find_torch_wheel, user_code_files, wheelhouse_folders
from compiler.images.render import render_dockerfile
from compiler.launch.plan import checked_plan
from compiler.spec.errors import ConfigError

LLAMA = ["data.token_dtype=uint32"]  # a 128k vocabulary needs 32-bit token files
SCRIPT = ["trainer=script", "trainer.source_dir=code", "trainer.script=train.py"]
PRESETS = {
    "smoke": ["experiment=smoke"],
    "gpt2-124m-p4d": ["experiment=gpt2-124m-p4d"],
    "smoke-compile": ["experiment=smoke", "trainer.compile=blocks"],  # inductor needs g++ and Python.h
    "smoke-trackers": [  # the pinned clients of the trackers the plan uses, and only those
        "experiment=smoke",
        "trainer.trackers=[tensorboard,mlflow,wandb]",
        "trainer.mlflow.tracking_uri=http://127.0.0.1:5000",
    ],
    "llama3-8b-p5x4": ["experiment=llama3-8b-p5x4", *LLAMA],
    "llama3-70b-p5x16": ["experiment=llama3-70b-p5x16", *LLAMA],
    # Each family with everything it can take: the user's code, apt and pip packages.
    "cpu-local-script": [
        "experiment=smoke",
        *SCRIPT,
        "image.system_packages=[g++]",
        "image.python_packages=['einops==0.8.2']",
    ],
    "cuda-script": ["experiment=llama3-8b-p5x4", *LLAMA, *SCRIPT, "image.system_packages=[numactl]"],
    "dlc-script": ["experiment=gpt2-124m-p4d", *SCRIPT, "image.python_packages=['deepspeed==0.19.8']"],
}


def plan_of(*overrides: str):
    return checked_plan(compose_config(list(overrides)))


@pytest.mark.parametrize("preset", PRESETS)
def test_dockerfile_matches_golden(preset: str, golden) -> None:
    golden.check(f"dockerfiles/{preset}.Dockerfile", render_dockerfile(plan_of(*PRESETS[preset])))


def test_a_managed_mlflow_arn_adds_the_sagemaker_mlflow_plugin_to_the_trackers_layer() -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team"
    managed = render_dockerfile(
        plan_of("experiment=smoke", "trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={arn}")
    )
    (layer,) = [line for line in managed.splitlines() if "mlflow-skinny==" in line]
    assert "sagemaker-mlflow==0.5.0" in layer
    assert "sagemaker-mlflow" not in render_dockerfile(plan_of(*PRESETS["smoke-trackers"]))


def test_plans_with_more_features_build_on_the_layers_of_plans_with_fewer() -> None:
    """A text plan's image, a chat plan's (transformers renders the conversations) and a tracked chat plan's:
    each Dockerfile is the one before it up to its feature layers, then one more, so each image's build takes
    the one before's layers from the cache."""
    documents = [
        "data=s3",
        "data.uri=s3://dockyard-example-data/docs/",
        "data.tokenizer=s3://dockyard-example-data/tokenizer/",
    ]
    plans = [
        ["experiment=smoke", *documents, "data.format=text"],
        ["experiment=smoke", *documents, "data.format=chat"],
        ["experiment=smoke", *documents, "data.format=chat", "trainer.trackers=[tensorboard]"],
    ]
    installs = [
        [line for line in render_dockerfile(plan_of(*plan)).splitlines() if line.startswith("RUN pip install")]
        for plan in plans
    ]
    for fewer, more in itertools.pairwise(installs):
        assert more[: len(fewer)] == fewer and len(more) == len(fewer) + 1, (fewer, more)
    assert [line.split()[-1] for line in installs[-1][-3:]] == [
        "zstandard==0.25.0",
        "transformers==5.24.0",
        "tensorboard==2.21.0",
    ]


def test_layers_go_from_slowest_to_fastest_changing() -> None:
    lines = render_dockerfile(plan_of(*PRESETS["cpu-local-script"])).splitlines()
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(prefix))
        for prefix in (
            "FROM ",
            "RUN apt-get update",
            "COPY wheelhouse/",
            "RUN pip install --no-build-isolation --constraint",
            "RUN pip install --no-build-isolation einops",
            "COPY dockyard/",
            "COPY --chown=dockyard",
        )
    ]
    assert order == sorted(order)
    assert lines[-1].startswith("COPY --chown=dockyard:dockyard code/"), "the user's code must be the last layer"
    assert 'ENTRYPOINT ["dockyard-entrypoint"]' in lines
    assert not any(line.startswith("USER ") for line in lines), "the image starts as root, as SageMaker expects"


def test_a_compiled_plan_adds_its_toolchain_above_the_eager_plans_python_layers() -> None:
    """Switching `trainer.compile` on builds one layer (g++ and Python.h), not torch and the pins again."""
    eager = render_dockerfile(plan_of(*PRESETS["smoke"])).splitlines()
    compiled = render_dockerfile(plan_of(*PRESETS["smoke-compile"])).splitlines()
    runtime = next(i for i, line in enumerate(eager) if line.startswith("# dockyard's runtime"))
    toolchain = next(i for i, line in enumerate(compiled) if "--no-install-recommends g++ python3-dev" in line)
    assert compiled[:runtime] == eager[:runtime]  # every layer below the runtime, torch's and the pins' among them
    assert "COPY wheelhouse/ /tmp/wheelhouse/" in eager[:runtime]
    assert runtime < toolchain < compiled.index(eager[runtime])


def test_cuda_image_installs_the_pinned_network_stack_without_cuda_compat() -> None:
    text = render_dockerfile(plan_of(*PRESETS["llama3-8b-p5x4"], "image.nccl=2.26.5-1", "image.efa_installer=1.41.0"))
    assert "aws-efa-installer-1.41.0.tar.gz" in text
    assert "./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in text
    assert "libnccl2=2.26.5-1+cuda12.8" in text
    assert "apt-get purge -y $(dpkg-query -W -f '${Package}\\n' 'cuda-compat-*'" in text
    assert "LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:" in text
    assert "download.pytorch.org/whl/cu128 torch==2.13.0" in text


DOCUMENTS = (
    "data=s3",
    "data.uri=s3://dockyard-example-data/docs/",
    "data.format=text",
    "data.tokenizer=s3://dockyard-example-data/tokenizer/",
)


def test_the_document_readers_are_installed_only_for_plans_that_read_documents() -> None:
    readers = "tokenizers==0.23.3 datasets==5.2.0 pyarrow==25.0.1 zstandard==0.25.0"
    assert readers in render_dockerfile(plan_of("experiment=smoke", *DOCUMENTS))
    assert "tokenizers" not in render_dockerfile(plan_of("experiment=smoke"))
    assert "datasets==5.1.0" in render_dockerfile(plan_of("experiment=smoke", *DOCUMENTS, "image.datasets=5.1.0"))


def test_dlc_image_adds_only_dockyard_and_user_layers() -> None:
    text = render_dockerfile(plan_of("experiment=gpt2-124m-p4d", *SCRIPT))
    assert "torch==" not in text and "venv" not in text and "constraint" not in text
    assert text.count("\nRUN ") == 3  # the user, dockyard's pinned dependencies, dockyard


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (
            ["experiment=llama3-8b-p5x4", *LLAMA, "image.base=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"],
            "image.base",
        ),
        (["experiment=llama3-8b-p5x4", *LLAMA, "image.base=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"], "image.base"),
        (["experiment=llama3-8b-p5x4", *LLAMA, "image.cuda=12.6"], "image.cuda"),
        (["experiment=llama3-8b-p5x4", *LLAMA, "image.nccl=null"], "image.nccl"),
        (["experiment=llama3-8b-p5x4", *LLAMA, "image.nccl=2.27"], "image.nccl"),
        (["experiment=llama3-8b-p5x4", *LLAMA, "image.torch=null"], "image.torch"),
        (["experiment=gpt2-124m-p4d", "image.torch=2.7.1"], "image.torch"),
        (["experiment=gpt2-124m-p4d", "image.efa_installer=1.41.0"], "image.efa_installer"),
        (["image.gdrcopy=2.5.1"], "image.gdrcopy"),
        (["image.torch='2.13; rm -rf /'"], "image.torch"),
        (["image.pyarrow='25; curl x'"], "image.pyarrow"),
        (["image.mlflow_skinny='3.17.2 ; rm -rf /'"], "image.mlflow_skinny"),
        (["image.system_packages=['g++ && curl x']"], "image.system_packages"),
        (["image.python_packages=[torch]"], "image.python_packages"),
        (["image.python_packages=['x==1 --index-url=http://evil']"], "image.python_packages"),
        (["image.push=true"], "image.registry"),
    ],
)
def test_invalid_image_configs_are_config_errors(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as error:
        plan_of(*overrides)
    assert error.value.key == key


def test_a_cuda_base_from_a_private_registry_is_taken_as_given() -> None:
    plan = plan_of(*PRESETS["llama3-8b-p5x4"], "image.base=registry.example.com/ml/cuda-base:2026.11")
    assert render_dockerfile(plan).startswith("# Rendered by dockyard from images/cuda.Dockerfile.j2")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder with training code, a .dockerignore and files it excludes."""
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('training')\n")
    (code / "pkg" / "model.py").write_text("LAYERS = 2\n")
    (code / "notes.log").write_text("scratch\n")
    (code / "data").mkdir()
    (code / "data" / "big.bin").write_bytes(b"\0" * 1000)
    (code / "data" / "keep.txt").write_text("kept by !\n")
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"pyc")
    (code / ".dockerignore").write_text("# local only\n*.log\ndata\n!data/keep.txt\n")
    return tmp_path


def test_user_code_honours_dockerignore(project: Path) -> None:
    files = user_code_files(project / "code")
    assert sorted(files) == ["code/.dockerignore", "code/data/keep.txt", "code/pkg/model.py", "code/train.py"]


def test_tag_changes_with_the_code_and_not_with_ignored_files(project: Path) -> None:
    plan = plan_of("experiment=smoke", *SCRIPT)
    first = build_context(plan, cwd=project).tag
    (project / "code" / "notes.log").write_text("more scratch\n")
    (project / "code" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"other")
    assert build_context(plan, cwd=project).tag == first
    (project / "code" / "pkg" / "model.py").write_text("LAYERS = 3\n")
    changed = build_context(plan, cwd=project).tag
    assert changed != first
    (project / "code" / "pkg" / "model.py").chmod(0o755)
    assert build_context(plan, cwd=project).tag != changed, "the mode of a file is part of the image"
    assert build_context(plan, cwd=project, base_id="sha256:1").tag != build_context(plan, cwd=project).tag


def test_context_tar_has_normalised_entries(project: Path) -> None:
    import io
    import tarfile

    context = build_context(plan_of("experiment=smoke", *SCRIPT), cwd=project)
    buffer = io.BytesIO()
    context.write_tar(buffer)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("Dockerfile").read().decode() == context.dockerfile
    assert {m.mtime for m in members.values()} == {0} and {m.uid for m in members.values()} == {0}
    assert members["code/pkg"].isdir() and members["wheelhouse"].isdir()
    assert any(name.startswith("wheelhouse/torch-2.13.0+cpu-") for name in members)
    assert "dockyard/compiler/spec/plan.py" in members and "dockyard/entrypoint/__init__.py" in members
    shipped = {name.split("/")[1] for name in members if name.startswith("dockyard/")}
    assert shipped == {"compiler", "entrypoint"}
    compiler_files = {name for name in members if name.startswith("dockyard/compiler/") and members[name].isfile()}
    assert compiler_files - {"dockyard/compiler/__init__.py"}
    assert all(n == "dockyard/compiler/__init__.py" or n.startswith("dockyard/compiler/spec/") for n in compiler_files)


@pytest.fixture
def dockyard_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of dockyard's tree that the build context reads instead of the real one, to edit freely."""
    root = Path(__file__).resolve().parents[1]
    copy = tmp_path / "dockyard"
    for name in ("README.md", "pyproject.toml", "conf", "compiler", "entrypoint", "hydra_plugins"):
        source = root / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            copy.mkdir(exist_ok=True)
            shutil.copy(source, copy / name)
    monkeypatch.setattr(context, "PACKAGES_ROOT", copy)
    return copy


HOST_SIDE_EDITS = (
    "README.md",
    "pyproject.toml",
    "conf/config.yaml",
    "compiler/cli/main.py",
    "compiler/sweep/launcher.py",
)
HOST_SIDE_EDITS += (
    "compiler/planner/estimate.py",
    "compiler/launch/runs.py",
    "hydra_plugins/dockyard_launcher/config.py",
)


def test_only_a_runtime_edit_changes_the_image_tag(dockyard_copy: Path) -> None:
    """The tag is a hash of what the image runs: editing the docs, the config language, the CLI, the sweep,
    the planner or a target leaves it; editing the runtime (the trainer, the Plan's types) changes it."""
    plan = plan_of("experiment=smoke")
    before = build_context(plan, cwd=dockyard_copy, base_id="sha256:base").tag
    for name in HOST_SIDE_EDITS:
        with (dockyard_copy / name).open("a") as file:
            file.write("\n# an edit\n")
    assert build_context(plan, cwd=dockyard_copy, base_id="sha256:base").tag == before
    for name in ("entrypoint/train.py", "compiler/spec/plan.py"):
        with (dockyard_copy / name).open("a") as file:
            file.write("\n# an edit\n")
        after = build_context(plan, cwd=dockyard_copy, base_id="sha256:base").tag
        assert after != before, name
        before = after


def test_only_python_modules_of_the_runtime_go_into_the_image(dockyard_copy: Path) -> None:
    """A wheel installs the runtime's modules only: another file in a checkout's runtime folders (an editor's
    backup, notes) must not make its image differ from the installed dockyard's."""
    plan = plan_of("experiment=smoke")
    before = build_context(plan, cwd=dockyard_copy, base_id="sha256:base")
    (dockyard_copy / "entrypoint" / "launcher" / "main.py.orig").write_text("an editor's backup\n")
    after = build_context(plan, cwd=dockyard_copy, base_id="sha256:base")
    assert after.tag == before.tag and after.files == before.files


def test_wheelhouse_defaults_to_pips_find_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nfind-links = {tmp_path / 'a'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "none"))
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'b'} https://example.com/wheels")
    image = plan_of("experiment=smoke").image
    assert wheelhouse_folders(image) == [tmp_path / "b", tmp_path / "a"]


def test_a_missing_torch_wheel_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        find_torch_wheel(plan_of("experiment=smoke").image, [tmp_path])
    assert error.value.key == "image.wheelhouse" and "torch-2.13.0+cpu-cp311" in error.value.message


def test_code_commit_label_names_the_commit(tmp_path: Path) -> None:
    from compiler.images.context import code_commit

    assert code_commit(tmp_path) is None
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    (tmp_path / "train.py").write_text("x = 1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert code_commit(tmp_path) == head
    (tmp_path / "train.py").write_text("x = 2\n")
    assert code_commit(tmp_path) == f"{head}-dirty"


def test_botocore_is_constrained_to_the_boto3_release_the_image_pins():
    """boto3 accepts any botocore of its minor release, so without this a rebuild could pull a newer one."""
    from compiler.images.render import CONSTRAINTS
    from compiler.spec.schema import ImageConfig

    constraints = dict(line.split("==") for line in CONSTRAINTS.read_text().splitlines() if "==" in line)
    assert constraints["botocore"] == ImageConfig().boto3
