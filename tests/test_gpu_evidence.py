"""`bench/gpu_evidence.sh`, the GPU evidence script, in its `--cpu` mode (tiny shapes, gloo), so that the
script a GPU session runs in one call has not rotted: every part runs and passes, the report is whole, the
budget stops what it no longer covers, and `bench.gpu_evidence.apply` turns a run's JSON into the
planner's constants and the README's figures."""

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import planner_accuracy
from bench.gpu_evidence import apply, jobs
from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_evidence.sh"
ASSUMPTIONS = REPO / "compiler" / "planner" / "assumptions.py"


def evidence(out: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    command = [str(SCRIPT), "--cpu", str(out), *args]
    environment = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(out.parent)}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout)


@pytest.mark.torchrun
def test_the_cpu_mode_runs_every_part_and_the_apply_step_reads_its_json(tmp_path):
    out = tmp_path / "evidence"
    result = evidence(out, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    document = json.loads((out / "gpu_evidence.json").read_text())
    parts = document["parts"]
    assert {name: part["status"] for name, part in parts.items()} == dict.fromkeys(parts, "done")

    paths = {row["path"]: row for row in parts["paths"]["rows"]}
    assert list(paths) == [job["name"] for job in jobs.path_jobs("cpu", jobs.CPU_INSTANCE)]
    assert {"DDP", "FSDP hybrid", "FSDP+TP", "ZeRO-3", "pipeline 1F1B", "compile model", "LoRA"} <= set(paths)
    assert [name for name, row in paths.items() if row["ok"] is not True] == []
    assert (paths["DDP"]["group"], paths["FSDP+TP"]["group"], paths["pipeline 1F1B"]["group"]) == (
        "gloo",
        "fake",
        "gloo",
    )

    mfu = parts["mfu"]["rows"]
    assert [(row["model"], row["compile"]) for row in mfu] == [("tiny", "false"), ("tiny", "blocks")]
    assert all(row["tokens_per_s"] > 0 and 0 < row["mfu"] < 0.01 and row["step_s"] > 0 for row in mfu)

    accuracy = parts["accuracy"]
    assert len(accuracy["rows"]) == 2 and all("error" not in row for row in accuracy["rows"])
    assert accuracy["summary"]["error_allocated"]["worst"] < 0.25  # tensor bytes within a quarter on CPU

    markdown = (out / "gpu_evidence.md").read_text()
    assert "| DDP | 1 | gloo | pass |" in markdown
    assert re.search(r"planner vs max_memory_allocated: median \|error\| [\d.]+%, worst [\d.]+%", markdown)

    # step 3, on copies of the files it edits: a CPU run is refused without the test's flag, then applied
    root = tmp_path / "checkout"
    (root / ASSUMPTIONS.relative_to(REPO)).parent.mkdir(parents=True)
    (root / "bench").mkdir()
    shutil.copyfile(ASSUMPTIONS, root / ASSUMPTIONS.relative_to(REPO))
    shutil.copyfile(REPO / "README.md", root / "README.md")
    command = [sys.executable, "-m", "bench.gpu_evidence.apply", str(out), "--root", str(root)]
    refused = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and "is a --cpu run" in refused.stderr
    applied = subprocess.run([*command, "--allow-cpu"], cwd=REPO, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    efficiency = apply.figures(document)["matmul_efficiency"]
    text = (root / ASSUMPTIONS.relative_to(REPO)).read_text()
    assert f"ASSUMED_MATMUL_EFFICIENCY = {efficiency:.3g}\n" in text
    assert "measured: bench/gpu_evidence.md (CPU" in text
    assert "cuda_context_mib   no passing rows: left as it was" in applied.stdout  # a CPU has no CUDA context
    assert (root / "bench" / "gpu_evidence.md").read_text() == markdown


def test_the_budget_stops_a_part_at_its_share_and_skips_the_rest_with_a_note(tmp_path):
    out = tmp_path / "evidence"
    result = evidence(out, "--budget", "2", "--parts", "paths", "mfu", timeout=120)
    assert result.returncode == 1
    parts = json.loads((out / "gpu_evidence.json").read_text())["parts"]
    paths = parts["paths"]
    assert paths["status"] == "stopped at its share of the budget"
    skipped = int(re.fullmatch(r"budget spent: skipped (\d+) jobs \(.*\)", paths["notes"][-1])[1])
    assert len(paths["rows"]) + skipped == len(jobs.path_jobs("cpu", jobs.CPU_INSTANCE))
    assert parts["mfu"]["status"] != "done" and parts["accuracy"]["status"] == "waiting"
    assert "budget spent: skipped" in (out / "gpu_evidence.md").read_text()


def test_every_job_of_the_gpu_run_plans_on_an_h100(hf_checkpoints):
    """The CPU mode runs other shapes: the GPU run's own plans are checked here, so that a planner rule
    added later cannot turn a lease's jobs into ConfigErrors."""
    gpu_jobs = jobs.all_jobs("cuda", "NVIDIA H100 80GB HBM3")
    for job in gpu_jobs["paths"] + gpu_jobs["mfu"]:
        checkpoint = [f"model.path={hf_checkpoints['llama']}"] if job.get("kind") == "hf" else []
        plan = checked_plan(compose_config([*job["overrides"], *checkpoint]))
        assert plan.instance.gpu_memory_gib > 70 and plan.layout.world_size == job.get("world", 1)
        assert plan.estimate.memory.total < plan.instance.gpu_memory_gib * 2**30, job["name"]  # fits one GPU
    for job in gpu_jobs["accuracy"]:
        args = (tuple(job["extra"]), job["strategy"], job["ranks"], job["micro_batch"], job["checkpointing"])
        assert planner_accuracy.plan_for(*args).layout.world_size == job["ranks"]
    assert len(gpu_jobs["accuracy"]) >= 12 and {job["name"] for job in gpu_jobs["mfu"]} == {
        "gpt2-124m",
        "gpt2-350m",
        "llama3.2-1b",
    }


GPU_RUN = {
    "mode": "cuda",
    "device": "NVIDIA H100 80GB HBM3",
    "started": "2026-11-28T10:00:00+00:00",
    "parts": {
        "accuracy": {
            "rows": [
                {"config": "a", "allocated": 1000, "reserved": 1100, "outside_allocator": 500 * 2**20},
                {"config": "b", "allocated": 1000, "reserved": 1200, "outside_allocator": 520 * 2**20},
                {"config": "c", "allocated": 1000, "reserved": 1040, "outside_allocator": 510 * 2**20},
                {"config": "d", "ok": False, "error": "RuntimeError: CUDA out of memory"},
            ]
        },
        "mfu": {
            "rows": [
                {"model": "gpt2-124m", "compile": "false", "ok": True, "mfu": 0.31, "predicted_mfu": 0.30},
                {"model": "gpt2-350m", "compile": "false", "ok": True, "mfu": 0.35, "predicted_mfu": 0.40},
                {"model": "gpt2-350m", "compile": "blocks", "ok": True, "mfu": 0.52},
                {"model": "llama3.2-1b", "compile": "false", "ok": False, "error": "OOM"},
            ]
        },
    },
}


def test_a_gpu_runs_figures_are_the_medians_of_its_passing_rows():
    assert apply.figures(GPU_RUN) == {"cuda_context_mib": 510, "allocator_margin": 0.1, "matmul_efficiency": 0.33}


def test_the_constants_and_the_readme_figures_are_rewritten_with_their_source():
    found = apply.figures(GPU_RUN)
    text = apply.updated_assumptions(ASSUMPTIONS.read_text(), found, "measured: bench/gpu_evidence.md (H100)")
    assert "CUDA_CONTEXT_BYTES = 510 * 2**20\n" in text and "ALLOCATOR_MARGIN = 0.1\n" in text
    assert "ASSUMED_MATMUL_EFFICIENCY = 0.33\n" in text
    namespace: dict = {}
    exec(compile(text, "assumptions.py", "exec"), namespace)
    sources = {item.name: item.source for item in namespace["ASSUMPTIONS"]}
    assert sources["CUDA context"] == sources["matmul efficiency"] == "measured: bench/gpu_evidence.md (H100)"
    assert "not measured" in sources["NCCL buffers"]  # no figure for it: left as it was
    assert namespace["ASSUMPTIONS"][0].value == "510 MiB per GPU"
    readme = apply.updated_readme((REPO / "README.md").read_text(), found)
    assert "the CUDA context (510 MiB)" in readme and "the allocator's margin (10%)" in readme
    assert re.search(r"predicted step time and MFU \(33%\)", readme)


def test_the_measured_gpu_familys_efficiency_is_rewritten_with_its_source():
    """The H100 run moves H100's fitted level by its eager rows' median of measured over predicted MFU
    (0.31 / 0.30 and 0.35 / 0.40), keeps the size dependence, and leaves the other families as they were."""
    text = ASSUMPTIONS.read_text()
    before: dict = {}
    exec(compile(text, "assumptions.py", "exec"), before)
    family, share = apply.family_efficiency(GPU_RUN, text)
    expected = before["MATMUL_EFFICIENCY"]["H100"].peak_share * (0.31 / 0.30 + 0.35 / 0.40) / 2
    assert family == "H100" and share == pytest.approx(expected, abs=1e-3)
    after: dict = {}
    updated = apply.updated_family(text, family, share, "measured: bench/gpu_evidence.md (H100)")
    exec(compile(updated, "assumptions.py", "exec"), after)
    old, new = before["MATMUL_EFFICIENCY"], after["MATMUL_EFFICIENCY"]
    assert new["H100"].peak_share == share and new["H100"].source == "measured: bench/gpu_evidence.md (H100)"
    fields = dataclasses.astuple  # the two namespaces' classes differ: their fields are compared
    assert fields(new["H100"])[1:5] == fields(old["H100"])[1:5]
    assert fields(new["A100"]) == fields(old["A100"]) and fields(new["H200"]) == fields(old["H200"])
    h200 = {**GPU_RUN, "device": "NVIDIA H200"}
    assert apply.family_efficiency(h200, updated)[0] == "H200"
    assert apply.family_efficiency({**GPU_RUN, "device": "NVIDIA L40S"}, updated) is None  # no fit to move
