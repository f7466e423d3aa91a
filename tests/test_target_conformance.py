"""The contract every registered target keeps, run over `registry.kinds()` as Hydra runs its
`LauncherTestSuite` over every launcher: a new target passes these before anything else.

- The target is what the registry says it is, with its capabilities declared.
- `to_request` is pure: the same plan, image and run id give the same text, whatever the environment and
  the working folder; `str(request)` is the text `submit` sends (JSON, Kubernetes' YAML manifests, or
  Slurm's sbatch script), and `request.to_json()` the same request as JSON (what a sweep's dry run keeps).
- `launch --dry-run` prints exactly that request (for the run id and folder it chose) and leaves nothing
  behind.
- A plan that this target cannot run is a `ConfigError` naming the key, at compile time or in `to_request`.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.core.capabilities import Capabilities
from compiler.images.build import planned_reference
from compiler.launch import runs
from compiler.spec import TargetKind
from compiler.spec.errors import ConfigError
from compiler.targets import registry
from tests.helpers import plan_for

ROLE = "arn:aws:iam::123456789012:role/dockyard-training"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
VALID = {
    "local": ("experiment=smoke",),
    "sagemaker": (
        "experiment=gpt2-124m-p4d",
        f"target.role_arn={ROLE}",
        "target.output_uri=s3://dockyard-jobs/runs",
        "image.push=true",
        f"image.registry={ECR}",
    ),
    "kubernetes": ("experiment=llama3-8b-p5x4", "target=kubernetes", "image.push=true", f"image.registry={ECR}"),
    "slurm": ("experiment=smoke", "target=slurm"),
}
"""Overrides of a plan each target runs; a new target adds its line."""
INVALID = {
    "local": (
        ("experiment=smoke", "data=efs", "data.file_system_id=fs-0123456789abcdef0", "data.path=/d"),
        "data.source",
    ),
    "sagemaker": ((*VALID["sagemaker"], "target.max_retries=31"), "target.max_retries"),
    "kubernetes": ((*VALID["kubernetes"], "target.namespace=Training"), "target.namespace"),
    "slurm": ((*VALID["slurm"], "target.partition=gpu p5"), "target.partition"),
}
"""Overrides of a plan each target refuses, and the key its error names."""
DOCKYARD = str(Path(sys.executable).with_name("dockyard"))


@pytest.fixture(params=registry.kinds())
def kind(request) -> str:
    assert request.param in VALID and request.param in INVALID, f"add target {request.param} to VALID and INVALID"
    return request.param


def test_every_target_kind_of_the_config_language_is_registered():
    assert set(registry.kinds()) == {kind.value for kind in TargetKind}
    with pytest.raises(ConfigError) as error:
        registry.get("mainframe")
    assert error.value.key == "target"


def test_the_registry_serves_the_kind_with_its_capabilities(kind):
    target = registry.get(kind)
    assert target.kind == kind
    assert isinstance(target.capabilities, Capabilities) and isinstance(target.attached, bool)
    assert registry.get(kind) is target  # one instance, imported once


def test_the_request_is_pure_and_renders_what_is_sent(kind, tmp_path, monkeypatch):
    plan = plan_for(*VALID[kind])
    target = registry.get(kind)
    image = target.image_reference(plan, "dockyard/conformance:0123456789ab")
    first = target.to_request(plan, image, run_id="conformance-1", run_dir=tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKYARD_CONFORMANCE", "must not matter")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    second = target.to_request(plan, image, run_id="conformance-1", run_dir=tmp_path / "run")
    assert str(first) == str(second) and first.to_json() == second.to_json()
    assert isinstance(json.loads(first.to_json()), dict)
    assert first.run_id == "conformance-1" and first.image == image
    assert "must not matter" not in str(first)
    assert not any(tmp_path.iterdir()), "to_request wrote files"


def test_an_invalid_plan_for_the_target_is_refused_when_planning(kind):
    """The target's own request checks run when planning (`dockyard plan`), not only when launching."""
    overrides, key = INVALID[kind]
    with pytest.raises(ConfigError) as error:
        plan_for(*overrides)
    assert error.value.key == key


def test_the_dry_run_prints_the_request_and_leaves_nothing(kind, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run(
        [DOCKYARD, "launch", "--dry-run", *VALID[kind], f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert not any(tmp_path.iterdir()), list(tmp_path.rglob("*"))
    plan = plan_for(*VALID[kind])
    run_id = re.search(rf"{re.escape(plan.name)}-\d{{8}}-\d{{6}}-\d{{3}}", result.stdout)[0]
    image = runs.dry_run_image(plan, planned_reference(plan, cwd=Path.cwd()))
    assert result.stdout == str(runs.translate(plan, image, run_id, run_dir))
