"""Runs one part's jobs in this process, from job FIRST on, printing a line before each job and one with each
result, so that the parent knows which job a crash or a hang took down and restarts a worker after it:

    python -m bench.gpu_evidence.worker PART DEVICE JOBS.json FIRST

Every job makes its plan with the planner's own code (`compose_config`, `checked_plan`) and runs the
trainer's own code (`make_engine`, `checkpoint.Checkpoints`, `save_final_model`, `entrypoint.trainer.workers`),
in the process group `start_group` gives it.
"""

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from bench import planner_accuracy
from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec import Plan
from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.main import WARM_WORKERS
from entrypoint.trainer.engines import Engine, make_engine
from entrypoint.trainer.metrics.measure import memory_gib, mfu
from tests.entrypoint_support import free_port, metrics
from tests.pretrained import save_checkpoint

REPO = Path(__file__).resolve().parents[2]
STARTED, RESULT = "@@started", "@@result"


def start_group(world: int, device: torch.device) -> str:
    """A process group for rank 0 of `world` ranks: the worker's one real group (NCCL on a GPU, gloo on CPU),
    kept from job to job since DeepSpeed holds on to the group it first saw; the fake group for more ranks."""
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world))
    if world == 1 and dist.is_initialized() and dist.get_backend() != "fake":
        return dist.get_backend()
    if dist.is_initialized():
        dist.destroy_process_group()
    if world > 1:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        return "fake"
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(minutes=5))
    return backend


def end_group(device: torch.device) -> None:
    """After a job: a fake group goes (the next job makes its own); on a GPU, memory back to where it was (on
    CPU a full collection costs half a second per job, and the peak resident size cannot be reset anyway)."""
    if dist.is_initialized() and dist.get_backend() == "fake":
        dist.destroy_process_group()
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def train_steps(engine: Engine, plan: Plan, device: torch.device, steps: int) -> tuple[list[float], list[float]]:
    """Losses and seconds of `steps` steps on random tokens."""
    losses, seconds = [], []
    shape = (plan.batch.grad_accum, plan.batch.micro_batch, plan.model.seq_len + 1)
    for _ in range(steps):
        tokens = torch.randint(0, plan.model.vocab, shape, device=device)
        start = time.perf_counter()
        loss = engine.forward_backward([(micro[:, :-1], micro[:, 1:]) for micro in tokens])
        engine.step(plan.trainer.lr)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        losses.append(float(loss))
    return losses, seconds


def checked_loss(losses: list[float], group: str) -> float:
    """The last loss; a real group's must be finite (a fake one's all-gathers fill nothing, so not its)."""
    if group != "fake" and not all(map(torch.isfinite, torch.tensor(losses))):
        raise RuntimeError(f"losses not finite: {losses}")
    return losses[-1]


def path_job(job: dict, device: torch.device, folder: Path) -> dict:
    overrides = list(job["overrides"])
    if job["kind"] == "hf":
        overrides.append(f"model.path={save_checkpoint(folder / 'pretrained', 'llama')}")
    plan = checked_plan(compose_config(overrides))
    if job["kind"] == "trainer":
        if device.type == "cuda" and torch.cuda.device_count() < plan.layout.world_size:
            have = torch.cuda.device_count()
            return {"ok": None, "error": f"skipped: needs {plan.layout.world_size} GPUs, this machine has {have}"}
        return {"group": "nccl" if plan.instance.has_gpus else "gloo", "loss": trainer_loop(plan, folder)}
    group = start_group(job["world"], device)
    engine = make_engine(plan, device)
    losses, _ = train_steps(engine, plan, device, 2)
    if job["kind"] == "hf":
        exported_from_pretrained(engine, plan, Paths(folder / "run"))
    if job["kind"] == "checkpoint":
        losses += resumed_losses(engine, plan, device, folder / "checkpoints")
    return {"group": group, "loss": checked_loss(losses, group)}


def exported_from_pretrained(engine: Engine, plan: Plan, paths: Paths) -> None:
    """The final model as the trainer saves it, read back by transformers (and peft, with LoRA)."""
    from transformers import AutoModelForCausalLM

    from entrypoint.trainer.train import save_final_model  # here: an import error fails this job only

    save_final_model(engine, plan, paths)
    AutoModelForCausalLM.from_pretrained(paths.model)
    if plan.model.lora.rank:
        from peft import PeftModel

        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(paths.model), paths.model / "adapter")


def resumed_losses(engine: Engine, plan: Plan, device: torch.device, root: Path) -> list[float]:
    """A checkpoint as the trainer writes it (async: staged in pinned memory on a GPU), loaded by a second
    engine that then trains a step."""
    from entrypoint.trainer import checkpoint  # here: an import error fails this job only

    metadata = {"plan": plan.content_hash}
    saver = checkpoint.Checkpoints(engine, root, plan.trainer, True, metadata, device.type == "cuda")
    saver.save(2)
    saver.close()
    done = checkpoint.complete(root)
    if not done:
        raise RuntimeError(f"no complete checkpoint under {root}")
    resumed = make_engine(plan, device)
    resumed.load(done[-1][1])
    return train_steps(resumed, plan, device, 1)[0]


def trainer_loop(plan: Plan, folder: Path) -> float:
    """The trainer on the plan's ranks as the entrypoint starts it (torchrun's agent forking them from one
    interpreter that imported the trainer, `entrypoint.trainer.workers`); the last logged loss."""
    path = folder / "plan.json"
    path.write_text(plan.to_json())
    ranks = plan.layout.world_size
    command = [sys.executable, "-m", WARM_WORKERS, f"--nproc-per-node={ranks}"]
    command += [f"--master-port={free_port()}", "-m", "entrypoint.trainer", f"--plan={path}"]
    environment = {**os.environ, "DOCKYARD_ROOT": str(folder)}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):  # torchrun's to set
        environment.pop(name, None)
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(last_line(result.stderr or result.stdout) or f"exit status {result.returncode}")
    return metrics(folder)[-1]["loss"]


def mfu_job(job: dict, device: torch.device) -> dict:
    plan = checked_plan(compose_config(job["overrides"]))
    start_group(1, device)
    engine = make_engine(plan, device)
    warmup = train_steps(engine, plan, device, job["warmup"])[1]
    losses, seconds = train_steps(engine, plan, device, plan.trainer.steps - job["warmup"])
    checked_loss(losses, "real")
    step = statistics.median(seconds)
    tokens_per_s = plan.batch.micro_batch * plan.model.seq_len / step
    predicted = plan.estimate.throughput.step_seconds
    return {
        "micro_batch": plan.batch.micro_batch,
        "seq_len": plan.model.seq_len,
        "parameters": plan.parameters,
        "tokens_per_s": tokens_per_s,
        "mfu": mfu(plan, tokens_per_s),
        "predicted_mfu": plan.estimate.throughput.mfu,
        "peak_bytes": round(memory_gib(device) * 2**30),
        "predicted_step_s": predicted,
        "step_s": step,
        "error_step": (predicted - step) / step,
        "first_step_s": warmup[0],
    }


def accuracy_job(job: dict, device: torch.device) -> dict:
    """`bench/planner_accuracy.py`'s measurement of one configuration (it makes the fake group itself)."""
    args = (tuple(job["extra"]), job["strategy"], job["ranks"], job["micro_batch"], job["checkpointing"])
    plan = planner_accuracy.plan_for(*args)
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(job["ranks"]))
    measured = planner_accuracy.measure(plan, device.type)
    return planner_accuracy.row(job["name"], job["strategy"], job["ranks"], job["checkpointing"], plan, measured)


def last_line(text: str) -> str:
    """The line that says what went wrong: the last non-empty one that is not a traceback's frame."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(("File ", "^", "~", "[rank"))]
    return (meaningful or lines or [""])[-1][:400]


def run_job(part: str, job: dict, device: torch.device) -> dict:
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-evidence-") as folder:
            if part == "paths":
                result = path_job(job, device, Path(folder))
            elif part == "mfu":
                result = mfu_job(job, device)
            else:
                result = accuracy_job(job, device)
        result = {"ok": True} | result
    except Exception as error:  # every failure is evidence: its line goes into the report, the next job runs
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(error).__name__}: {last_line(str(error)) or repr(error)}"}
    finally:
        end_group(device)
    return result | {"seconds": round(time.perf_counter() - start, 2)}


def compile_without_inductor() -> None:
    """On CPU, `nn.Module.compile` (what `entrypoint.trainer.compiled` calls) traces with dynamo and AOTAutograd
    but runs the graphs eagerly: inductor's C++ code generation takes minutes on two shared cores, and the
    CPU mode checks that the trainer's code compiles, not how fast its kernels are."""
    compile_module = nn.Module.compile

    def traced_only(self: nn.Module, *args, **kwargs) -> None:
        compile_module(self, *args, **{**kwargs, "backend": "aot_eager"})

    nn.Module.compile = traced_only  # type: ignore[method-assign]


def main() -> None:
    part, device_type, jobs_file, first = sys.argv[1:5]
    device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if device.type == "cpu":
        compile_without_inductor()
    jobs = json.loads(Path(jobs_file).read_text())
    for index in range(int(first), len(jobs)):
        print(STARTED, index, flush=True)
        print(RESULT, index, json.dumps(run_job(part, jobs[index], device)), flush=True)
        if jobs[index].get("alone"):
            return  # the parent starts a fresh worker for the next job


if __name__ == "__main__":
    main()
