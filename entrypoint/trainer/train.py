"""The built-in trainer, one process per rank under torchrun: `python -m entrypoint.trainer --plan plan.json`.

It reads top to bottom: process group, model, strategy, data, resume, the derived numbers, the loop,
the final model, its task scores (`trainer.eval_tasks`) and what it says (`trainer.sample_prompts`). The
entrypoint sets DOCKYARD_BACKEND, DOCKYARD_ROOT and DOCKYARD_TIMEOUT; torchrun sets RANK, LOCAL_RANK and
WORLD_SIZE. DOCKYARD_STOP_AT_STEP=N ends the run cleanly after step N (a long job split into parts; the next
part resumes from the checkpoint at N when N is a checkpoint step).
"""

import argparse
import math
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from compiler.spec import Plan
from compiler.spec.s3 import download_s3
from compiler.spec.schema import DataFormat, DataSource, Job, Objective, TrainerConfig
from compiler.spec.tokenizer import TokenizerFacts, replace_tokens
from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.main import DEFAULT_TIMEOUT_S
from entrypoint.trainer import checkpoint, restarts
from entrypoint.trainer.compiled import use_warm_cache
from entrypoint.trainer.data import prepare
from entrypoint.trainer.data.base import CacheMeta, TargetsError
from entrypoint.trainer.data.batches import Batches, data_folder, make_source
from entrypoint.trainer.data.chat import ChatRecordError
from entrypoint.trainer.engines import Engine, make_engine
from entrypoint.trainer.engines.sequence_parallel import parallel_loss
from entrypoint.trainer.health import this_node
from entrypoint.trainer.metrics import RunEnd, TrackedRun, open_sinks
from entrypoint.trainer.metrics.measure import memory_gib, mfu
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.models.experts import expert_lines
from entrypoint.trainer.models.quantized import quantized_lines
from entrypoint.trainer.models.source import with_local_checkpoint
from entrypoint.trainer.models.weights import copy_tokenizer
from entrypoint.trainer.objective import Preference
from entrypoint.trainer.optim import lr_at
from entrypoint.trainer.resilience import Guards, named_hangs
from entrypoint.trainer.samples import prompts
from entrypoint.trainer.task_scores import MODEL_COPY, judge, judged
from entrypoint.trainer.teardown import leave


def init_distributed(plan: Plan, timeout_s: float) -> torch.device:
    backend = os.environ.get("DOCKYARD_BACKEND") or ("nccl" if plan.instance.has_gpus else "gloo")
    if backend == "smddp":
        import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers the smddp backend
    device = torch.device("cpu")
    if plan.instance.has_gpus:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    if dist.get_world_size() != plan.layout.world_size:
        raise RuntimeError(
            f"the plan's layout has {plan.layout.world_size} ranks "
            f"({plan.layout.nodes} nodes × {plan.layout.processes_per_node}), torchrun started {dist.get_world_size()}"
        )
    return device


@dataclass(frozen=True)
class Data:
    train: Batches
    validation: Batches | None
    lines: list[str]
    """What rank 0 reports about the data in the run's first lines."""
    tokenizer: Path | None = None
    """The tokenizer's folder on this node (text and chat data): the final model carries its files."""
    cache: Path | None = None
    """The token cache's folder (text and chat data)."""


def prepare_data(plan: Plan, paths: Paths, leader: bool) -> Data:
    folder = None
    dp_rank = plan.layout.coordinates(dist.get_rank()).dp
    if plan.data.source is not DataSource.synthetic:
        folder = data_folder(plan, paths.channel(plan.data.channel))
        empty = not folder.is_dir() or not any(folder.iterdir())
        if plan.data.source is DataSource.s3 and empty and leader:
            download_s3(plan.data.uri, folder)
        dist.barrier()
    if plan.data.format is DataFormat.tokens:
        return Data(Batches(make_source(plan, folder), plan, dp_rank), None, [])
    log = (lambda line: print(line, flush=True)) if leader else (lambda line: None)
    tokenizer = prepare.tokenizer_folder(plan, paths, leader)
    cache = prepare.ensure_cache(plan, folder, tokenizer, prepare.cache_root(plan, paths), leader, log)
    eos = TokenizerFacts.read(tokenizer, data=plan.data).eos_id
    train, validation, lines = prepare.open_windows(plan, cache, eos)
    held_out = None if validation is None else Batches(validation, plan, dp_rank)
    return Data(Batches(train, plan, dp_rank), held_out, lines, tokenizer, cache)


def tokenize(plan: Plan, paths: Paths, timeout_s: float) -> None:
    """`dockyard tokenize`: the token cache and nothing else (no model is built), the nodes splitting the documents
    among them where they share its folder; ends with what it holds and the time it took."""
    init_distributed(plan, timeout_s)
    started = time.perf_counter()
    data = prepare_data(plan, paths, int(os.environ.get("LOCAL_RANK", "0")) == 0)
    if dist.get_rank() == 0 and data.cache is not None:
        splits = CacheMeta.read(data.cache).splits.values()
        tokens, documents = sum(s.tokens for s in splits), sum(s.documents for s in splits)
        seconds = time.perf_counter() - started
        print("\n".join(data.lines), flush=True)
        print(
            f"tokenized         {tokens:,} tokens, {documents:,} documents in {seconds:.1f} s: {data.cache}", flush=True
        )
    dist.barrier()


def precompute_reference(engine: Engine, plan: Plan, data: Data, device: torch.device) -> None:
    """trainer.dpo.precompute_reference: the reference model's log-probabilities of every training and held-out
    pair, each data-parallel replica computing a share (the ranks of a replica's tensor- or context-parallel
    group compute the same pairs together), before the first step and before a checkpoint replaces the starting
    weights; the reference model is let go after. Outside a step, so under the `loss_parallel()` the engine's
    steps run their losses in (tensor parallelism's logits split by vocabulary)."""
    if not (isinstance(engine.objective, Preference) and plan.trainer.dpo.precompute_reference):
        return
    shares = [batches for batches in (data.train, data.validation) if batches is not None]
    with parallel_loss(plan.layout.tp):
        engine.objective.precompute(
            (inputs.to(device), targets.to(device))
            for share in shares
            for inputs, targets in share.source.every_pair(share.replica, share.replicas, plan.batch.micro_batch)
        )


def validation_metrics(engine: Engine, plan: Plan, held_out: Batches) -> dict:
    """The mean loss over `trainer.eval_batches` validation steps (always the same batches) and its perplexity
    (sft), or the objective's own metrics on them (dpo: the held-out pairs' rewards)."""
    accum, batches = plan.batch.grad_accum, plan.trainer.eval_batches
    total = sum(
        engine.evaluate([held_out.micro_batch(index, micro) for micro in range(accum)]) for index in range(batches)
    )
    loss = global_mean(total / (accum * batches), plan.layout.ranks_per_stage)
    own = {f"val_{name}": value for name, value in objective_metrics(engine, plan).items()}
    if plan.trainer.objective is not Objective.sft:
        return {"val_loss": round(loss, 6)} | own
    return {"val_loss": round(loss, 6), "val_ppl": round(math.exp(min(loss, 50.0)), 4)}


def objective_metrics(engine: Engine, plan: Plan) -> dict[str, float]:
    """The objective's metrics since the last call (DPO's rewards and log-probabilities), averaged over the ranks;
    every rank calls it."""
    device = next(engine.parts[0].parameters()).device
    return {
        name: round(global_mean(torch.tensor(value, device=device), plan.layout.ranks_per_stage), 6)
        for name, value in engine.objective.metrics().items()
    }


def tracked_run(plan: Plan, paths: Paths) -> TrackedRun:
    """What the trackers are opened with; every target sets DOCKYARD_RUN_ID (a bare torchrun is `local`)."""
    return TrackedRun(plan, paths.output, os.environ.get("DOCKYARD_RUN_ID", "local"))


def derived_lines(plan: Plan, backend: str, start_step: int) -> list[str]:
    layout, batch = plan.layout, plan.batch
    samples = "sequences" if plan.trainer.objective is Objective.sft else "pairs"  # dpo: a chosen and a rejected
    lines = [
        f"world size        {layout.world_size} = {layout.nodes} nodes × {layout.processes_per_node} processes",
        f"layout            dp {layout.dp} × tp {layout.tp} × pp {layout.pp}, {plan.parallelism.strategy.value} "
        f"over {backend}, shard group {layout.shard_degree}" + ("" if layout.cp == 1 else f", cp {layout.cp}"),
        f"parameters        {plan.parameters:,} ({plan.model.name})",
        f"batch             {batch.global_batch} {samples} = micro {batch.micro_batch} × accum {batch.grad_accum} "
        f"× dp {layout.dp}" + ("" if layout.cp == 1 else f" / cp {layout.cp}"),
        f"tokens per step   {batch.tokens_per_step:,} (seq_len {batch.seq_len})",
        f"FLOPs per token   {plan.derived.flops_per_token:.3e}",
        f"steps             {start_step} → {plan.trainer.steps}" + (" (resumed)" if start_step else ""),
    ]
    if layout.pp > 1:
        layers = "/".join(str(count) for count in layout.layers_per_stage)
        lines.append(
            f"pipeline          {plan.parallelism.pp_schedule}, {layout.stages} stages of {layers} layers, "
            f"{batch.grad_accum} micro batches per step"
        )
    return lines


def save_final_model(engine: Engine, plan: Plan, paths: Paths, tokenizer: Path | None = None) -> None:
    export_model(engine, plan, paths.model, tokenizer)


def export_model(engine: Engine, plan: Plan, folder: Path, tokenizer: Path | None = None) -> Path:
    """The whole model, in its family's weights format, from rank 0, with the tokenizer it was trained with."""
    state = engine.full_state_dict()
    if dist.get_rank() == 0:
        model_spec(plan.model).weights.save(folder, state, plan.to_dict()["model"])
        if tokenizer is not None:
            copy_tokenizer(tokenizer, folder)
            replace_tokens(folder, plan.data)
    return folder


def global_mean(value: torch.Tensor, holders: int) -> float:
    """The mean of `value` over the `holders` ranks that compute it (the others contribute zero)."""
    total = value.detach().float().clone()
    dist.all_reduce(total)
    return total.item() / holders


class JobStoppedError(RuntimeError):
    """SIGTERM ended the run after a checkpoint; the next run (a restarted spot job) resumes from it."""


class StopSignal:
    """SIGTERM (a managed-spot interruption, a stopped job) asks for a checkpoint at the end of the current
    step. torchrun passes the signal on to every worker and kills them 30 s later."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(signal.SIGTERM, self._receive)

    def _receive(self, number: int, frame: object) -> None:
        self.received = True

    def agreed(self, device: torch.device) -> bool:
        """True on every rank as soon as any rank got the signal: one scalar all-reduce per step."""
        flag = torch.tensor(float(self.received), device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def step_record(
    plan: Plan,
    device: torch.device,
    step: int,
    losses: tuple[float, float],
    lr: float,
    norm: float,
    steps: int,
    seconds: float,
) -> dict:
    """`seconds` for the `steps` steps since the last record, `losses` their mean loss (`loss`, as the HF
    Trainer and TRL log it) and the last step's own (`step_loss`). The first record of a run is its first step
    alone, where torch.compile compiles: its `step_s` against a later one's is the compile time."""
    tokens_per_s = plan.batch.tokens_per_step * steps / seconds
    efficiency = mfu(plan, tokens_per_s)
    return {
        "step": step,
        "loss": round(losses[0], 6),
        "step_loss": round(losses[1], 6),
        "lr": lr,
        "grad_norm": round(norm, 6),
        "tokens_per_s": round(tokens_per_s, 1),
        "step_s": round(seconds / steps, 4),
        "mfu": None if efficiency is None else round(efficiency, 4),
        "memory_gib": round(memory_gib(device), 3),
    }


def plateaued(losses: list[float], patience: int) -> bool:
    """Whether the last `patience` validation losses are none lower than the best before them."""
    return bool(patience) and len(losses) > patience and min(losses[-patience:]) >= min(losses[:-patience])


def evaluates(trainer: TrainerConfig, done_steps: int) -> bool:
    """Validation every `eval_interval` steps, and after the last step."""
    interval = trainer.eval_interval
    return done_steps == trainer.steps or bool(interval and done_steps % interval == 0)


def train(plan: Plan, paths: Paths, timeout_s: float, stop_at: int | None) -> None:
    stop = StopSignal()
    use_warm_cache(plan.trainer, paths.checkpoints)
    device = init_distributed(plan, timeout_s)
    rank, leader = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0")) == 0
    notes = paths.restart_notes(this_node(plan).host)
    restarted = restarts.begin(plan.trainer.restarts, notes, leader, device)
    skip_check = restarts.health_check_skipped(restarted, notes, leader, device)
    guards = Guards.start(plan, paths, device, timeout_s, skip_check)  # the health check, stragglers, hangs
    if leader and plan.trainer.restarts and not restarted:
        restarts.note_healthy(notes)
    plan = with_local_checkpoint(plan, paths)
    engine = make_engine(plan, device)
    guards.time_compute(plan, engine)
    data = prepare_data(plan, paths, leader)
    precompute_reference(engine, plan, data, device)
    start, val_losses = 0, list[float]()
    done = checkpoint.complete(paths.checkpoints)
    if done:
        start, folder = done[-1]
        engine.load(folder)
        val_losses = checkpoint.progress(folder).get("val_losses", [])  # early stopping's count goes on
    failed = restarts.failures(notes, leader) if restarted else []
    if rank == 0:
        backend = dist.get_backend()
        targets = plan.model.lora.targets if plan.model.lora.rank else None
        moe = expert_lines(engine.parts[0], plan.layout.ep, targets)
        base = quantized_lines(engine.parts[0])
        print("\n".join([*derived_lines(plan, backend, start), *moe, *base, *data.lines]), flush=True)
        if restarted:
            count, limit = restarted, plan.trainer.restarts
            print(restarts.record_restart(paths.checkpoints, paths.output, count, start, limit, failed), flush=True)
    trainer, accum = plan.trainer, plan.batch.grad_accum
    saver = checkpoint.Checkpoints(
        engine, paths.checkpoints, trainer, leader, {"plan": plan.content_hash}, plan.instance.has_gpus
    )
    sinks = open_sinks(plan.trainer.trackers, tracked_run(plan, paths)) if rank == 0 else []
    sample_prompts = prompts(plan, paths) if rank == 0 else []
    end = RunEnd.failed
    try:
        started = last_time = time.perf_counter()
        last_step, window_loss = start, torch.zeros((), device=device)  # the losses' sum since the last record
        completed = False
        for step in range(start, trainer.steps):
            guards.before_step(step)
            loss = engine.forward_backward([data.train.micro_batch(step, micro) for micro in range(accum)])
            window_loss += loss
            lr = lr_at(step, trainer, plan.derived)
            norm = engine.step(lr)
            done_steps = step + 1
            guards.after_step(done_steps, sinks)
            validating = data.validation is not None and evaluates(trainer, done_steps)
            if validating or done_steps % trainer.log_interval == 0 or done_steps in (start + 1, trainer.steps):
                holders, window = plan.layout.ranks_per_stage, done_steps - last_step
                losses = global_mean(window_loss / (accum * window), holders), global_mean(loss / accum, holders)
                now = time.perf_counter()
                trained = objective_metrics(engine, plan)
                held_out = validation_metrics(engine, plan, data.validation) if validating else {}
                if sinks:
                    record = step_record(plan, device, done_steps, losses, lr, norm, window, now - last_time)
                    for sink in sinks:
                        sink.write(record | trained | held_out | {"elapsed_s": round(now - started, 3)})
                last_time, last_step = time.perf_counter(), done_steps  # a step's time leaves validation out
                window_loss.zero_()
                val_losses += [held_out["val_loss"]] if held_out else []
                if plateaued(val_losses, trainer.early_stopping_patience):
                    completed = True
                    if rank == 0:
                        print(
                            f"early stop        after step {done_steps}: {trainer.early_stopping_patience} "
                            "validations without a lower loss",
                            flush=True,
                        )
                    break
            if done_steps < trainer.steps and judged(trainer, done_steps):
                copy = export_model(engine, plan, paths.checkpoints / MODEL_COPY, data.tokenizer)
                judge(plan, paths, copy, done_steps, sinks, sample_prompts)
                last_time = time.perf_counter()  # the next record's step time leaves the evaluation out
            if rank == 0 and trainer.restarts:
                restarts.note_reached(paths.checkpoints, done_steps)
            saver.poll()
            stopped = stop.agreed(device)
            if (stopped and done_steps < trainer.steps) or saver.due(done_steps):
                saver.save(done_steps, {"val_losses": list(val_losses)})
            if stopped:
                saver.close()
                raise JobStoppedError(f"stopped by SIGTERM after step {done_steps}; its checkpoint is saved")
            if stop_at is not None and done_steps >= stop_at:
                break
        else:
            completed = True
        if completed:
            saver.close()
            save_final_model(engine, plan, paths, data.tokenizer)
            if judged(trainer, trainer.steps):
                judge(plan, paths, paths.model, last_step, sinks, sample_prompts, last=True)
        saver.close()
        guards.close()
        end = RunEnd.finished
    except JobStoppedError:
        end = RunEnd.stopped
        raise
    finally:
        for sink in sinks:  # the trackers' runs end as the run did
            sink.close(end)
    dist.barrier()


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m entrypoint.trainer", description=__doc__)
    parser.add_argument("--plan", required=True, type=Path)
    args = parser.parse_args(argv)
    plan = Plan.from_json(args.plan.read_text())
    stop = os.environ.get("DOCKYARD_STOP_AT_STEP")
    paths = Paths(Path(os.environ.get("DOCKYARD_ROOT", "/opt/ml")))
    timeout_s = float(os.environ.get("DOCKYARD_TIMEOUT", DEFAULT_TIMEOUT_S))
    with named_hangs():
        try:
            if plan.job is Job.tokenize:
                tokenize(plan, paths, timeout_s)
            else:
                train(plan, paths, timeout_s, int(stop) if stop else None)
        except (ChatRecordError, TargetsError) as error:  # the data's fault, said in one line
            raise SystemExit(f"dockyard: {error}") from None
    leave(0)  # every rank has passed the final barrier with its files closed


if __name__ == "__main__":
    main()
