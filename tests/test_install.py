"""dockyard as a user installs it: the wheel (built from the sdist, as `python -m build` does) in a fresh
virtualenv outside the repository, and a project from `dockyard init` in an empty folder, trained on two
local container nodes, dry-run on SageMaker and Kubernetes, and swept.

Nothing is downloaded: the fresh virtualenv holds dockyard's wheel alone, and reaches the packages it
depends on through a path line to this environment's site-packages (a `.pth` line adds the folder only, so
the editable dockyard installed there stays out of sight; the test checks where `compiler` comes from).
"""

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKOUT_DOCKYARD = Path(sys.executable).with_name("dockyard")
IMAGE_STACK = ("torch", "deepspeed", "transformers", "tensorboard", "mlflow-skinny", "wandb")
"""What belongs to the image (and the `train` extra), never to the host's own requirements."""
SAGEMAKER = (
    "hardware=ml.m5.xlarge",
    "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training",
    "image.push=true",
    "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
    "target.output_uri=s3://my-bucket/dockyard",
)
"""An instance type, and what a SageMaker dry run takes from the caller's account when it has credentials
(the test gives none)."""
IMAGE_TAG = re.compile(r"dockyard/mine:[0-9a-f]{20}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh virtualenv's bin folder, the wheel), built and installed once for the module."""
    root = tmp_path_factory.mktemp("installed")
    dist = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("dockyard-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q"]
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True)
    [site] = venv.glob("lib/python*/site-packages")
    (site / "host_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin", wheel


def run(command: list[str], cwd: Path, timeout: int = 120) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    said = [line for line in result.stdout.splitlines() if line.startswith("dockyard")]  # which node failed, why
    assert result.returncode == 0, "\n".join(said) + "\n" + result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_the_wheel_needs_only_the_hosts_packages(installed: tuple[Path, Path]) -> None:
    """The image's stack is an extra (`dockyard[train]`); the templates and pins are package data."""
    _, wheel = installed
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        names = set(archive.namelist())
    requires = [line.partition(":")[2].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    for package in IMAGE_STACK:
        pinned = [r for r in requires if re.match(rf"{package}\b", r)]
        assert pinned and all("extra ==" in r for r in pinned), (package, pinned)
    for data in ("cpu-local.Dockerfile.j2", "constraints.txt", "make-base"):
        assert f"compiler/images/{data}" in names


@pytest.mark.torchrun
def test_an_initialised_project_trains_from_the_wheel(installed: tuple[Path, Path], engine, tmp_path: Path) -> None:
    """`dockyard init demo && cd demo && dockyard launch experiment=mine` on two local container nodes; dry
    runs on SageMaker and Kubernetes and a dry-run sweep; the checkout's dockyard plans the same image."""
    bin_dir, _ = installed
    dockyard = str(bin_dir / "dockyard")
    where = run([str(bin_dir / "python"), "-c", "import compiler, entrypoint; print(compiler.__file__)"], tmp_path)
    assert where.startswith(str(bin_dir.parent)), where
    assert "image pins (image.<name>): torch 2.13.0" in run([dockyard, "--version", "-v"], tmp_path)

    run([dockyard, "init", "demo"], tmp_path)
    project = tmp_path / "demo"
    assert "  experiment: " in run([dockyard, "plan", "--help"], project)  # the user's option among dockyard's
    assert "mine" in run([dockyard, "plan", "--help"], project).partition("  experiment: ")[2].splitlines()[0]

    launched = run([dockyard, "launch", "experiment=mine"], project, timeout=600)
    assert "completed" in launched, launched
    [model] = project.glob("outputs/mine/*/model/model.pt")
    assert model.stat().st_size > 0

    sagemaker = run([dockyard, "launch", "experiment=mine", "target=sagemaker", "--dry-run", *SAGEMAKER], project)
    assert '"TrainingJobName"' in sagemaker
    kubernetes = ("launch", "experiment=mine", "target=kubernetes", "--dry-run")
    [image] = set(IMAGE_TAG.findall(run([dockyard, *kubernetes], project)))
    from_checkout = run([str(CHECKOUT_DOCKYARD), *kubernetes], project)
    assert set(IMAGE_TAG.findall(from_checkout)) == {image}  # the same runtime, wherever dockyard is installed

    swept = run([dockyard, "launch", "-m", "trainer.steps=5,10", *kubernetes[1:]], project)
    assert len(list(project.glob("multirun/mine/*/*/request*"))) == 2, swept
