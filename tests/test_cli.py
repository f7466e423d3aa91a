"""The real `dockyard` command in a subprocess: what a user sees, what it writes, its exit status."""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from compiler.spec import Plan
from compiler.targets import records
from compiler.targets.base import COMPLETED, FAILED
from compiler.targets.logs import stamped
from compiler.targets.records import RunRecord
from tests.helpers import plan_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def dockyard(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DOCKYARD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def written_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_plan_writes_plan_json_into_hydra_run_folder(tmp_path):
    result = dockyard("plan", "experiment=smoke", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [plan_file] = tmp_path.glob("outputs/smoke/*/plan.json")
    plan = Plan.from_json(plan_file.read_text())
    assert plan.content_hash == plan_for("experiment=smoke").content_hash
    assert f"sha256:{plan.content_hash[:12]}" in result.stdout
    assert "4 processes = 2 × cpu" in result.stdout
    assert "dp=4 × tp=1 × pp=1" in result.stdout
    assert "4,096 tokens/step" in result.stdout
    assert f"wrote     {plan_file}" in result.stdout


def test_issue_example_compiles(tmp_path):
    result = dockyard(
        "plan",
        "model=llama3-8b",
        "parallelism=fsdp-hybrid",
        "parallelism.tp=2",
        "hardware=p5.48xlarge",
        "hardware.nodes=4",
        "parallelism.micro_batch=1",
        "data=s3",
        "data.uri=s3://my-bucket/tokens",
        "data.token_dtype=uint32",
        "target=sagemaker",
        "image=cuda",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "run/plan.json").read_text())
    assert plan["layout"]["world_size"] == 32
    assert (plan["layout"]["dp"], plan["layout"]["tp"]) == (16, 2)
    assert "dp=16 × tp=2 × pp=1   fsdp_hybrid, shard group 4" in result.stdout


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["parallelism.tp=3"], "dockyard: error: parallelism.tp: dp=? × tp=3 × pp=1 cannot equal the world size"),
        (["parallelism.tpp=2"], "dockyard: error: parallelism.tpp: Key 'tpp' not in 'ParallelismConfig'; did you mean"),
        (["hardware=p5.48xlarg"], "dockyard: error: hardware: unknown hardware option 'p5.48xlarg'; did you mean"),
        (["data=s3"], "dockyard: error: data.uri: is missing; set data.uri=s3://bucket/prefix"),
        (["target=sagemaker"], "dockyard: error: hardware.instance_type: 'cpu' is this machine's own CPUs"),
    ],
)
def test_user_error_is_one_line_exit_2_and_writes_nothing(tmp_path, overrides, expected):
    result = dockyard("plan", *overrides, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(expected)
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert written_files(tmp_path) == []


def test_error_inside_an_existing_run_folder_leaves_the_users_files(tmp_path):
    keep = tmp_path / "mine.txt"
    keep.write_text("keep")
    result = dockyard("plan", "parallelism.dp=3", "hydra.run.dir=.", cwd=tmp_path)
    assert result.returncode == 2
    assert written_files(tmp_path) == [keep]


def test_cfg_job_prints_composed_config_and_writes_no_plan(tmp_path):
    result = dockyard("plan", "--cfg", "job", "model=gpt2-124m", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "name: gpt2-124m" in result.stdout
    assert "layers: 12" in result.stdout
    assert not list(tmp_path.rglob("plan.json"))


def test_info_lists_config_groups(tmp_path):
    result = dockyard("plan", "--info", "defaults", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "experiment/smoke" in result.stdout
    bare = dockyard("plan", "--info", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert "Defaults Tree" in bare.stdout


def test_help_is_dockyards_own_and_hydras_is_one_flag_away(tmp_path):
    result = dockyard("plan", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: dockyard plan [-m] [group=option ...]")
    assert "  parallelism: ddp, fsdp, fsdp-hybrid, smddp, zero1, zero2, zero3\n" in result.stdout
    assert "-m, --multirun" in result.stdout and "--dry-run" not in result.stdout
    assert "image_for_hardware" not in result.stdout and "schema/target" not in result.stdout
    assert "--dry-run" in dockyard("launch", "-h", cwd=tmp_path).stdout
    hydra = dockyard("plan", "--hydra-help", cwd=tmp_path)
    assert hydra.returncode == 0 and "Hydra (" in hydra.stdout


def test_version_is_dockyards_and_verbose_names_the_libraries(tmp_path):
    assert dockyard("--version", cwd=tmp_path).stdout == f"dockyard {metadata.version('dockyard')}\n"
    assert dockyard("plan", "--version", cwd=tmp_path).stdout.startswith("dockyard ")
    verbose = dockyard("--version", "-v", cwd=tmp_path).stdout.splitlines()
    assert f"  hydra-core {metadata.version('hydra-core')}" in verbose
    assert verbose[3].startswith("  torch ")


def test_a_sweep_uses_dockyards_launcher_unless_asked_for_hydras(tmp_path):
    sweep = ["launch", "--dry-run", "-m", "trainer.lr=0.001,0.002"]
    ours = dockyard(*sweep, "hydra.sweep.dir=ours", cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert (tmp_path / "ours/summary.md").exists()
    basic = dockyard(*sweep, "hydra/launcher=basic", "hydra.sweep.dir=basic", cwd=tmp_path)
    assert basic.returncode == 0, basic.stderr
    assert not (tmp_path / "basic/summary.md").exists() and "#0 : trainer.lr=0.001" in basic.stdout


def test_dry_run_writes_summary_and_warnings_to_stderr_then_the_request_to_stdout(tmp_path):
    result = dockyard("launch", "--dry-run", "target=kubernetes", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("plan      smoke   sha256:")
    assert "warning   checkpoints and the final model stay in the pods" in result.stderr
    assert result.stdout.startswith("apiVersion: v1\nkind: ConfigMap\n")


def test_multirun_writes_one_plan_per_point(tmp_path):
    result = dockyard("plan", "-m", "trainer.lr=0.001,0.002", "parallelism=ddp,zero2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plans = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("multirun/smoke/*/*/plan.json"))]
    assert len(plans) == 4
    points = {(p["trainer"]["lr"], p["parallelism"]["strategy"]) for p in plans}
    assert points == {(0.001, "ddp"), (0.001, "zero2"), (0.002, "ddp"), (0.002, "zero2")}


def test_multirun_names_each_invalid_point_and_leaves_only_the_valid_ones(tmp_path):
    result = dockyard("plan", "-m", "parallelism.dp=3,4", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("dockyard: error: [job 0: parallelism.dp=3] parallelism.dp:")
    (sweep,) = tmp_path.glob("multirun/smoke/*")
    assert sorted(p.name for p in sweep.iterdir()) == ["1", "multirun.yaml"]
    result = dockyard("plan", "-m", "parallelism.dp=3,5", cwd=tmp_path)
    assert result.returncode == 2
    assert list(tmp_path.glob("multirun/smoke/*")) == [sweep]  # the second sweep left nothing


def test_config_dir_adds_user_configs(tmp_path):
    user_conf = tmp_path / "myconf"
    (user_conf / "experiment").mkdir(parents=True)
    (user_conf / "experiment/mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - smoke\n\nname: mine\ntrainer:\n  steps: 7\n"
    )
    (user_conf / "short.yaml").write_text("defaults:\n  - config\n  - _self_\n\ntrainer:\n  steps: 30\n")
    result = dockyard("plan", "-cd", str(user_conf), "experiment=mine", "hydra.run.dir=a", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "a/plan.json").read_text())["trainer"]["steps"] == 7
    result = dockyard("plan", "-cd", str(user_conf), "-cn", "short", "hydra.run.dir=b", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "b/plan.json").read_text())["trainer"]["steps"] == 30


def test_shell_completion_install_and_query(tmp_path):
    script = dockyard("plan", "-sc", "install=bash", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    assert "complete -o nospace -o default -F hydra_bash_completion dockyard" in script.stdout

    def query(line: str) -> list[str]:
        env = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line))}
        result = dockyard("-sc", "query=bash", cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert query("dockyard pl") == ["plan"]
    assert "parallelism=" in query("dockyard plan para")
    assert "model=llama3-8b" in query("dockyard plan model=")


def test_unknown_verb_suggests_the_nearest(tmp_path):
    result = dockyard("plna", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "dockyard: error: verb: unknown verb 'plna'; did you mean plan?\n"


def test_no_verb_prints_usage_and_exits_2(tmp_path):
    result = dockyard(cwd=tmp_path)
    assert result.returncode == 2
    assert "usage: dockyard VERB" in result.stdout


def recorded_run(folder: Path, run_id: str, **fields) -> Path:
    """A run's record as `launch` writes it (which registers its id in $DOCKYARD_HOME's index)."""
    records.save(RunRecord(run_dir=str(folder), run_id=run_id, target="local", steps=20, **fields))
    return folder


def test_runs_are_found_by_id_from_any_folder_newest_first(tmp_path):
    recorded_run(tmp_path / "a", "old-run", status=COMPLETED, started=1000.0, ended=1060.0, final={"loss": 2.5})
    recorded_run(tmp_path / "b", "new-run", status=FAILED, started=2000.0, ended=2030.0, exit_status=1)
    records.save(RunRecord(run_dir=str(tmp_path / "c"), run_id="dry-point", status=records.DRY_RUN))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = dockyard("runs", "-o", "json", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["run_id"], r["status"], r["elapsed_s"]) for r in rows] == [
        ("new-run", "failed", 30.0),
        ("old-run", "completed", 60.0),
    ]
    assert rows[1]["loss"] == 2.5
    completed = dockyard("runs", "--status", "completed", "--target", "local", cwd=elsewhere)
    assert completed.stdout.splitlines()[1].split()[:3] == ["old-run", "local", "completed"]
    assert len(completed.stdout.splitlines()) == 2
    assert len(json.loads(dockyard("runs", "--limit", "1", "-o", "json", cwd=elsewhere).stdout)) == 1
    status = dockyard("status", "old-run", "-o", "json", cwd=elsewhere)
    assert json.loads(status.stdout)["run_dir"] == str(tmp_path / "a")


def test_stop_on_a_run_that_ended_changes_nothing_and_says_so(tmp_path):
    folder = recorded_run(tmp_path / "run", "done-run", status=COMPLETED, started=1.0, ended=2.0, exit_status=0)
    before = (folder / records.RECORD_FILE).read_text()
    result = dockyard("stop", "done-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done-run had already ended (completed); nothing to stop\n"
    assert (folder / records.RECORD_FILE).read_text() == before


def test_an_unknown_run_is_one_line_naming_the_index(tmp_path, dockyard_home):
    result = dockyard("logs", "no-such-run", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"dockyard: error: run: no run 'no-such-run' in {dockyard_home / 'runs'} (set by $DOCKYARD_HOME); "
        "give a run id `dockyard runs` lists, or the run's folder\n"
    )


def test_logs_interleave_the_nodes_by_time_and_name_an_unknown_node(tmp_path):
    """A local run's logs as its runner keeps them (each node's lines stamped with when they came)."""
    folder = tmp_path / "run"
    (folder / "logs").mkdir(parents=True)
    for node, lines in {"algo-1": [(1.0, "one"), (3.0, "three")], "algo-2": [(2.0, "two"), (4.0, "four")]}.items():
        (folder / f"logs/{node}.log").write_text("".join(stamped(text, 1795647600 + t) + "\n" for t, text in lines))
    handle = {"run_id": "logged-run", "run_dir": str(folder)}
    recorded_run(folder, "logged-run", status=COMPLETED, handle=handle)
    every = dockyard("logs", "logged-run", cwd=tmp_path)
    assert every.stdout == "algo-1 | one\nalgo-2 | two\nalgo-1 | three\nalgo-2 | four\n"
    assert dockyard("logs", "logged-run", "--node", "algo-2", "--tail", "1", cwd=tmp_path).stdout == "algo-2 | four\n"
    unknown = dockyard("logs", "logged-run", "--node", "algo-3", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr == "dockyard: error: --node: the run has no node 'algo-3'; give one of algo-1, algo-2\n"
