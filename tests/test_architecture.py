"""The rules that keep the layout simple, checked on the source (DESIGN.md, "Rules that keep it simple").

- Only the targets package knows which targets exist: no module outside `compiler/targets/` branches on
  a target kind (`TargetKind.x`, `kind == "x"`, a target's schema class). The entrypoint may compare
  names: it tells apart the clusters it lands on (SageMaker's, Slurm's), which is not the plan's target.
- The runtime imports only the Plan's types: importing the entrypoint and the trainer loads no Hydra,
  omegaconf, Docker SDK or host-side compiler module.
"""

import ast
import subprocess
import sys
from pathlib import Path

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
