"""The Slurm target: golden sbatch scripts per container runtime, the values a script cannot hold, and
(with the cluster fixture) real jobs on the two-node Slurm cluster that scripts/ensure-slurm starts."""

from pathlib import Path

import pytest

from compiler.errors import ConfigError
from compiler.targets.slurm import translate
from tests.helpers import plan_for

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/golden:0123456789abcdef0123"
RUN_DIR = Path("/fsx/runs/golden")


def script(*overrides: str, image: str = IMAGE, run_dir: Path = RUN_DIR) -> str:
    return str(translate.to_request(plan_for(*overrides), image, run_id="golden-run", run_dir=run_dir))


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("smoke-docker", ["experiment=smoke", "target=slurm"]),
        ("llama3-8b-p5x4-pyxis", ["experiment=llama3-8b-p5x4", "target=slurm"]),
        (
            "llama3-8b-p5x4-docker",
            [
                "experiment=llama3-8b-p5x4",
                "target=slurm",
                "target.container_runtime=docker",
                "target.partition=p5",
                "target.account=ml-research",
                "target.max_retries=2",
                "target.max_run_hours=72.5",
                "+target.environment.NCCL_DEBUG=INFO",
            ],
        ),
        (
            "llama3-8b-p5x4-apptainer",
            ["experiment=llama3-8b-p5x4", "target=slurm", "target.container_runtime=apptainer"],
        ),
    ],
)
def test_sbatch_script_matches_golden(name, overrides, golden):
    golden.check(f"slurm/{name}.sh", script(*overrides))


def test_gpu_plans_default_to_pyxis_and_cpu_plans_to_docker():
    assert translate.runtime(plan_for("experiment=llama3-8b-p5x4", "target=slurm")).value == "pyxis"
    assert translate.runtime(plan_for("experiment=smoke", "target=slurm")).value == "docker"


@pytest.mark.parametrize(
    ("reference", "pyxis"),
    [
        (IMAGE, "123456789012.dkr.ecr.us-east-1.amazonaws.com#dockyard/golden:0123456789abcdef0123"),
        ("localhost:5000/dockyard/x:1", "localhost:5000#dockyard/x:1"),
        ("dockyard/smoke:abc", "dockyard/smoke:abc"),
    ],
)
def test_pyxis_names_the_registry_with_a_hash(reference, pyxis):
    assert translate.runtime_image(translate.ContainerRuntime.pyxis, reference) == pyxis


@pytest.mark.parametrize(("hours", "limit"), [(24, "1-00:00:00"), (0.5, "0-00:30:00"), (72.51, "3-00:31:00")])
def test_time_limit_rounds_up_to_the_minute(hours, limit):
    assert translate.time_limit(hours) == limit


@pytest.mark.parametrize(
    ("overrides", "run_dir", "key"),
    [
        (["target.partition=gpu p5"], RUN_DIR, "target.partition"),
        (["target.account=team/ml"], RUN_DIR, "target.account"),
        (["+target.environment.BAD-NAME=1"], RUN_DIR, "target.environment.BAD-NAME"),
        ([], Path("/runs/with space"), "hydra.run.dir"),
        ([], Path("/runs/a:b"), "hydra.run.dir"),
        (["data=local", "data.path='/data/tokens,extra'"], RUN_DIR, "data.path"),
    ],
)
def test_values_an_sbatch_script_cannot_hold_are_config_errors(overrides, run_dir, key):
    with pytest.raises(ConfigError) as error:
        script("experiment=smoke", "target=slurm", *overrides, run_dir=run_dir)
    assert error.value.key == key


def test_shell_values_are_quoted():
    text = script("experiment=smoke", "target=slurm", '+target.environment.GREETING="it\'s $(reboot)"')
    assert "export GREETING='it'\"'\"'s $(reboot)'\n" in text
