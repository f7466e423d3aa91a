"""The rules that keep the layout simple, checked on the source (DESIGN.md, "Rules that keep it simple").

- The layering is import-linter's contracts (`[tool.importlinter]` in pyproject.toml): the host's layers,
  host and runtime apart, a torch-free launcher, and one way from a config to a checked plan. They hold on
  the tree, and a copy of the tree with a deliberate violation fails the contract it breaks.

- Only the targets package knows which targets exist: no module outside `compiler/targets/` branches on
  a target kind (`TargetKind.x`, `kind == "x"`, a target's schema class). The entrypoint may compare
  names: it tells apart the clusters it lands on (SageMaker's, Slurm's), which is not the plan's target.
- The runtime imports only the Plan's types: importing the entrypoint and the trainer loads no Hydra,
  omegaconf, Docker SDK or host-side compiler module.
"""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TARGET_KINDS = {"local", "sagemaker", "kubernetes", "slurm"}
TARGET_SCHEMAS = {"LocalTargetConfig", "SageMakerTargetConfig", "KubernetesTargetConfig", "SlurmTargetConfig"}
OUTSIDE_TARGETS = [
    path
    for folder in ("compiler", "entrypoint", "hydra_plugins")
    for path in sorted((REPO / folder).rglob("*.py"))
    if "targets" not in path.relative_to(REPO).parts and "spec" not in path.relative_to(REPO).parts
]
"""Where no target may be named: everything but the targets (their own folder) and the Plan's types (which
define every target's schema)."""


def target_branches(path: Path, *, names: bool = True) -> list[str]:
    """`TargetKind.<kind>`, comparisons with a kind's name, and isinstance checks on a target's schema."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        text = ast.unparse(node) if isinstance(node, ast.expr) else ""
        kind_member = (
            isinstance(node, ast.Attribute) and node.attr in TARGET_KINDS and text.split(".")[-2:-1] == ["TargetKind"]
        )
        compared = (
            names
            and isinstance(node, ast.Compare)
            and any(isinstance(c, ast.Constant) and c.value in TARGET_KINDS for c in (node.left, *node.comparators))
        )
        schema = isinstance(node, ast.Name | ast.Attribute) and text.split(".")[-1] in TARGET_SCHEMAS
        if kind_member or compared or schema:
            found.append(f"{path.name}:{node.lineno} {text}")
    return found


def test_no_module_outside_the_targets_branches_on_the_target_kind():
    assert OUTSIDE_TARGETS, "the walk found no source"
    found = [
        branch
        for path in OUTSIDE_TARGETS
        for branch in target_branches(path, names=path.relative_to(REPO).parts[0] != "entrypoint")
    ]
    assert found == []


def test_the_check_finds_a_branch(tmp_path):
    """The rule above cannot pass by finding nothing: each form it looks for is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "if plan.target.kind is schema.TargetKind.local: pass\n"
        "if record.target == 'sagemaker': pass\n"
        "if isinstance(target, schema.KubernetesTargetConfig): pass\n"
    )
    assert len(target_branches(sample)) == 3


RUNTIME_IMPORTS = """
import sys
import entrypoint.launcher.main, entrypoint.trainer.train
import entrypoint.trainer.engines.native, entrypoint.trainer.engines.zero, entrypoint.trainer.engines.pipeline
host_side = [
    name for name in sys.modules
    if name.split(".")[0] in ("hydra", "omegaconf", "docker", "jinja2")
    or (name.startswith("compiler.") and not name.startswith("compiler.spec"))
]
print(sorted(host_side))
"""


def test_the_runtime_imports_only_the_plans_types():
    result = subprocess.run([sys.executable, "-c", RUNTIME_IMPORTS], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


LAUNCHER_IMPORTS = """
import sys
import entrypoint.launcher.main
print("torch" in sys.modules)
"""


def test_the_launcher_loads_no_torch():
    """The import contract ignores `Layout.build_mesh`'s lazy torch import; running the launcher loads none."""
    result = subprocess.run([sys.executable, "-c", LAUNCHER_IMPORTS], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the packages under `root`, with the contracts of `root/pyproject.toml`."""
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)


def test_the_import_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


VIOLATIONS = {
    "compiler/planner/x.py": ("from compiler.targets import registry\n", "The host's layers"),
    "compiler/sweep/x.py": ("from compiler.cli import tasks\n", "The host's layers"),
    "compiler/targets/x.py": ("from compiler.images import push\n", "The host's layers"),
    "compiler/cli/x.py": ("import entrypoint.launcher.main\n", "Host code never imports the runtime"),
    "entrypoint/x.py": ("from compiler.planner import estimate\n", "The runtime imports only the Plan's types"),
    "entrypoint/launcher/x.py": ("def f():\n    import torch\n", "The runtime's launcher imports no torch"),
    "compiler/cli/y.py": ("from compiler.planner.compile import compile_plan\n", "Only the launch layer compiles"),
}
"""A module that breaks one contract (a lazy import inside a function counts too), and the contract's name."""


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """The project's Python packages and its contracts, copied to break."""
    copy = tmp_path_factory.mktemp("tree")
    for name in ("compiler", "entrypoint", "hydra_plugins"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    return copy


@pytest.mark.parametrize("module", VIOLATIONS)
def test_a_violation_breaks_its_contract(tree_copy: Path, module: str):
    source, contract = VIOLATIONS[module]
    path = tree_copy / module
    path.write_text(source)
    try:
        result = lint_imports(tree_copy)
    finally:
        path.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts")[1]
    assert contract in broken and "1 broken" in result.stdout, result.stdout


def test_nothing_outside_the_launch_layer_compiles_a_plan():
    """Tests and benches, which import-linter does not see, reach a plan through `compiler.launch.plan`."""
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for folder in ("tests", "bench")
        for path in sorted((REPO / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "compiler.planner.compile"
    ]
    assert found == []
