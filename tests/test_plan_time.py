"""What `dockyard plan` does not do: import the libraries only other verbs need, build the schemas of the Hydra
plug-ins it does not use, and read the evaluation harness's thousands of task files when the plan's tasks are all
the user's own (bench/cli.py times the command)."""

import json
import subprocess
import sys

from hydra import compose, initialize_config_dir

from compiler.config.compose import CONF_DIR, CONFIG_NAME
from compiler.planner import eval_rules
from tests.eval_support import TASKS, tiny_model, write_tasks
from tests.helpers import plan_for

HEAVY = ("torch", "transformers", "boto3", "botocore", "docker", "jinja2", "lm_eval", "numpy", "safetensors")
"""The image's training stack, the AWS SDK, the Docker SDK and the template engine: a plan needs none of them."""

PLAN_IMPORTS = f"""
import contextlib, io, json, sys
from compiler.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["plan", "experiment=smoke"])
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & set({list(HEAVY)!r}))))
"""


def test_plan_imports_none_of_the_heavy_libraries(tmp_path):
    result = subprocess.run([sys.executable, "-c", PLAN_IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_tasks_of_the_include_path_are_checked_without_the_harness_task_list(tmp_path, hf_tokenizer):
    model, tasks = tiny_model(tmp_path / "model", hf_tokenizer), write_tasks(tmp_path / "tasks")
    eval_rules.harness_task_names.cache_clear()
    plan = plan_for(
        "model=hf",
        f"model.path={model}",
        "job=evaluate",
        f"eval.tasks=[{','.join(TASKS)}]",
        f"eval.include_path={tasks}",
    )
    assert plan.eval is not None and plan.eval.tasks == TASKS
    assert eval_rules.harness_task_names.cache_info().misses == 0


PLUGIN_SCHEMAS = """
import contextlib, io, json
from hydra.core.config_store import ConfigStore
from compiler.cli.main import main
from compiler.config.store import LazyNode
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["plan", "experiment=smoke"])
optuna = ConfigStore.instance().repo["hydra"]["sweeper"]["optuna.yaml"]
print(json.dumps([isinstance(optuna, LazyNode), isinstance(optuna, LazyNode) and optuna._node is not None]))
"""


def test_plan_stores_the_installed_plugins_schemas_without_building_them(tmp_path):
    """Hydra's plug-in scan imports the Optuna sweeper, whose module stores its schemas: a plan keeps them unbuilt."""
    result = subprocess.run([sys.executable, "-c", PLUGIN_SCHEMAS], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [True, False]


def test_a_lazily_stored_plugin_schema_composes_as_stored(tmp_path):
    """The Optuna sweeper's schema, built when a command names it, is the one its module stored."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(CONFIG_NAME, ["hydra/sweeper=optuna"], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert cfg.hydra.sweeper.n_trials == 20 and cfg.hydra.sweeper.sampler._target_ == "optuna.samplers.TPESampler"


STARTED = """
import contextlib, gc, io, json, sys
sys.argv = ["dockyard", "plan", "experiment=smoke"]
from compiler.cli import start
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    start.main()
print(json.dumps(["compiler.cli.main" in sys.modules, gc.isenabled(), gc.get_freeze_count() > 20_000]))
"""


def test_the_command_imports_without_the_cyclic_collector_and_leaves_it_running(tmp_path):
    """`compiler.cli.start`: the imports' objects frozen out of later collections, and the collector on again
    for the command's own work (a launch follows its job for hours)."""
    result = subprocess.run([sys.executable, "-c", STARTED], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [True, True, True]
