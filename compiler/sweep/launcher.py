"""Multirun sweeps on dockyard's Hydra launcher (`hydra/launcher=dockyard`).

A batch of points goes through four steps, each finished for every point before the next starts:
compose and validate (plan, image reference and request: a mistake in any point stops the sweep before
anything runs, unless `skip_invalid`), build (one build per distinct image), submit (at most
`max_concurrent` jobs at once, each through `compiler.launch.runs` as a single launch goes, with the same
run record; a failed job fails its point only) and report (the summary and the loss plot, one JobReturn per
point in order). `dry_run` stops after the first step
and writes each point's request instead of submitting it.
"""

import dataclasses
import functools
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from hydra.core.utils import JobReturn, JobStatus, _save_config
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, flag_override, open_dict
from omegaconf.errors import OmegaConfBaseException

from compiler.config import cache
from compiler.config.compose import reject_numbers_in_files, to_config
from compiler.config.hydra_errors import as_config_error
from compiler.config.project import project_dir
from compiler.launch import runs, summary
from compiler.launch.errors import InvalidSweepError, PointFailedError
from compiler.launch.plan import write_plan
from compiler.launch.prepare import prepare
from compiler.spec import Plan
from compiler.spec.errors import ConfigError
from compiler.sweep import parallel
from compiler.sweep.compose import PointComposer
from compiler.targets import records, registry
from compiler.targets.base import CANCELLED, COMPLETED, FAILED, STOPPED
from compiler.targets.local.translate import LocalRequest, alongside
from compiler.targets.records import DRY_RUN, INVALID, RunRecord

REQUEST_FILE = "request.json"


@dataclass(frozen=True)
class Options:
    max_concurrent: int = 4
    skip_invalid: bool = False
    dry_run: bool = False
    wait: bool = True
    objective: str | None = None


@dataclass
class Point:
    num: int
    overrides: tuple[str, ...]
    run_dir: Path | None = None
    cfg: DictConfig | None = None
    hydra_cfg: DictConfig | None = None
    plan: Plan | None = None
    run_id: str = ""
    request: Any = None
    error: str = ""
    record: RunRecord | None = None
    """A dry run's is made where the point is prepared and saved by `_dry_run`."""
    request_text: str = ""
    """A dry run's request as written to its file, rendered where the point is prepared (a worker, in parallel)."""
    job_name: str | None = None
    recompose: Callable[[], tuple[DictConfig, DictConfig]] | None = None
    """Where a worker prepared the point: composes its configs again (see `configs`)."""

    def configs(self) -> tuple[DictConfig | None, DictConfig | None]:
        """The point's config and `{"hydra": ...}`, composed again on first use where a worker prepared it."""
        if self.recompose is not None:
            self.cfg, self.hydra_cfg = self.recompose()
            self.recompose = None
        return self.cfg, self.hydra_cfg

    def without_configs(self) -> "Point":
        """The point as a worker sends it back: its configs are left out (pickling them took a sixth of preparing
        a point, and a dry run never reads them); the sweep composes them again if something does."""
        self.cfg = self.hydra_cfg = None
        return self


class Sweep:
    """One sweep; kept across the batches a sweeper launches (image references and composed bases are reused)."""

    def __init__(self, config_loader, config: DictConfig, options: Options, out: IO[str] | None = None) -> None:
        if options.objective and not options.wait:
            raise ConfigError(
                "hydra.launcher.objective", "needs each job's final metrics", "set hydra.launcher.wait=true"
            )
        if options.max_concurrent < 1:
            raise ConfigError("hydra.launcher.max_concurrent", "must be at least 1", "set it to 1 or more")
        self.composer = PointComposer(config_loader, config)
        self.options = options
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        self.project = project_dir(config.hydra)
        """The folder a relative `trainer.source_dir` is read from (`compiler.config.project`)."""
        self.started = datetime.now(UTC)
        self.references: dict[str, str] = {}
        """The image reference of each distinct build input (see `_expected_image`)."""
        self.out = sys.stdout if out is None else out
        self.interrupted = threading.Event()
        """Set on Ctrl-C: queued points are cancelled, local jobs stopped, remote ones left running."""
        self.at_once = 1
        """How many of this batch's jobs run at a time: local ones share this machine's CPUs."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        self.at_once = min(self.options.max_concurrent, len(job_overrides))
        points = self._prepare_all([(tuple(o), initial_job_idx + i) for i, o in enumerate(job_overrides)])
        invalid = [p for p in points if p.error]
        if invalid and not self.options.skip_invalid:
            self._discard_if_empty()
            raise InvalidSweepError([f"[job {p.num}: {' '.join(p.overrides)}] {p.error}" for p in invalid], len(points))
        valid = [p for p in points if not p.error]
        for point in invalid:
            folder = point.run_dir or self.sweep_dir / f"invalid-{point.num}"
            point.record = records.save(
                RunRecord(
                    run_dir=str(folder),
                    status=INVALID,
                    detail=point.error,
                    num=point.num,
                    overrides=list(point.overrides),
                )
            )
        if self.options.dry_run:
            self._dry_run(valid)
        else:
            self._build(valid)
            self._submit(valid)
        summary.write(self.sweep_dir)
        print(f"summary   {self.sweep_dir / summary.SUMMARY_MD}", file=self.out)
        returns = [self._job_return(point) for point in points]
        failures = [r.failure for r in returns if r.failure is not None]
        if failures:
            failures[0].also = failures[1:]
        return returns

    def _prepare_all(self, numbered: list[tuple[tuple[str, ...], int]]) -> list[Point]:
        """Every point prepared, in order: in this process, or by one worker per core for a large batch."""
        workers = parallel.workers_for(len(numbered))
        with cache.inputs_fixed():
            if workers == 1:
                return [self._prepare(overrides, num) for overrides, num in numbered]
            self.composer.warm([overrides for overrides, _ in numbered])
            first = self._prepare(*numbered[0])  # what every point loads (imports, schemas) loaded before the fork
            rest = parallel.prepare_all(numbered[1:], self._prepare, Point.without_configs, self.out, workers)
        for point in rest:
            if point.run_dir is not None:  # composed (where it failed to, it has no configs in this process either)
                point.recompose = functools.partial(self._configs, point.overrides, point.num)
        return [first, *rest]

    def _configs(self, overrides: tuple[str, ...], num: int) -> tuple[DictConfig, DictConfig]:
        return split_hydra_node(self.composer.compose(overrides, num))

    def _prepare(self, overrides: tuple[str, ...], num: int, out: IO[str] | None = None) -> Point:
        """Compose, compile and translate one point; a user's mistake becomes the point's error."""
        point = Point(num, overrides)
        try:
            cfg = self.composer.compose(overrides, num)
            point.run_dir = Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)).resolve()
            _check_creatable(point.run_dir)
            point.cfg, point.hydra_cfg = split_hydra_node(cfg)
            point.job_name = str(point.hydra_cfg.hydra.job.name)
            reject_numbers_in_files(point.hydra_cfg.hydra, point.cfg)
            prepared = prepare(
                to_config(cfg),
                point.run_dir,
                run_id=lambda plan: f"{runs.run_id_for(plan, self.started)}-{num}",
                planned=self._expected_image,
                out=self.out if out is None else out,
            )
            point.plan, point.run_id, point.request = prepared.plan, prepared.run_id, self._beside(prepared.request)
            if self.options.dry_run:
                point.request_text, point.record = point.request.to_json(), self._record(point, DRY_RUN)
            else:
                runs.preflight(point.plan, point.request)  # the target's refusals before anything is built
        except (ConfigError, HydraException, OmegaConfBaseException, ValueError) as exc:
            point.error = as_config_error(exc).one_line()
        return point

    def _expected_image(self, plan: Plan) -> str:
        """The content-hash reference a build of `plan` makes, hashed once per distinct build input (the
        Dockerfile, the trainer's code, an evaluation's folders), not once per point."""
        from compiler.images.build import planned_reference
        from compiler.images.context import context_inputs

        key = context_inputs(plan)
        if key not in self.references:
            self.references[key] = planned_reference(plan, cwd=self.project)
        return self.references[key]

    def _discard_if_empty(self) -> None:
        """Nothing ran: take back the multirun.yaml Hydra wrote, unless earlier batches left points."""
        if self.sweep_dir.is_dir() and not any(self.sweep_dir.glob(f"**/{records.RECORD_FILE}")):
            (self.sweep_dir / "multirun.yaml").unlink(missing_ok=True)
            discard(self.sweep_dir)

    def _dry_run(self, points: list[Point]) -> None:
        for point in points:
            point.run_dir.mkdir(parents=True, exist_ok=True)
            path = point.run_dir / REQUEST_FILE
            path.write_text(point.request_text)
            point.record = records.save(point.record)
            target = point.plan.target.kind.value
            print(f"#{point.num:<4} {' '.join(point.overrides)}  -> {target} request {path}", file=self.out)

    def _build(self, points: list[Point]) -> None:
        """One build (and push) per distinct image; every point then runs the reference that build made."""
        from compiler.images.workflow import IMAGE_FILE, build_and_record

        built_by_tag: dict[str, Any] = {}
        for point in points:
            expected = self._expected_image(point.plan)
            point.run_dir.mkdir(parents=True, exist_ok=True)
            if expected not in built_by_tag:
                built_by_tag[expected] = build_and_record(point.plan, point.run_dir, cwd=self.project, out=self.out)
            built = built_by_tag[expected]
            (point.run_dir / IMAGE_FILE).write_text(built.to_json() + "\n")
            request = runs.translate(point.plan, built.digest or built.reference, point.run_id, point.run_dir)
            point.request = self._beside(request)

    def _beside(self, request: Any) -> Any:
        """A local job's request counting the containers of the jobs that run beside it (`at_once`), which
        share this machine's CPUs: each is taken to have as many as this one."""
        return alongside(request, self.at_once) if isinstance(request, LocalRequest) and self.at_once > 1 else request

    def _submit(self, points: list[Point]) -> None:
        for point in points:
            self._write_job_files(point)
            point.record = records.save(self._record(point, records.PENDING))
            print(f"#{point.num:<4} {' '.join(point.overrides)}  -> {point.run_id}", file=self.out)
        pool = ThreadPoolExecutor(max_workers=self.options.max_concurrent)
        futures = [pool.submit(self._run_guarded, point) for point in points]
        try:
            for point, future in zip(points, futures, strict=True):
                point.record = future.result()
        except KeyboardInterrupt:
            self._interrupt(points, futures, pool)
            raise
        pool.shutdown()

    def _interrupt(self, points: list[Point], futures: list, pool: ThreadPoolExecutor) -> None:
        """Ctrl-C: cancel the points not started, stop the local jobs running (their threads remove the
        containers), detach from remote jobs (`dockyard status SWEEP_DIR` follows them), write the summary."""
        print("dockyard: interrupted: cancelling the points not started, stopping local jobs", file=self.out)
        self.interrupted.set()
        pool.shutdown(wait=False, cancel_futures=True)
        for point, future in zip(points, futures, strict=True):
            if future.cancelled():
                point.record = records.update(point.record, status=CANCELLED)
            elif not future.done() and registry.get(point.record.target).attached:
                runs.stop(records.load(point.run_dir))
        pool.shutdown(wait=True)
        summary.write(self.sweep_dir)

    def _write_job_files(self, point: Point) -> None:
        """What Hydra's own launchers leave in a job's folder (.hydra/) and what `dockyard launch` writes."""
        cfg, hydra_cfg = point.configs()
        output = point.run_dir / str(hydra_cfg.hydra.output_subdir)
        _save_config(cfg, "config.yaml", output)
        _save_config(hydra_cfg, "hydra.yaml", output)
        _save_config(OmegaConf.create(list(point.overrides)), "overrides.yaml", output)
        write_plan(point.plan, point.run_dir)

    def _run_guarded(self, point: Point) -> RunRecord:
        out = PrefixedWriter(self.out, f"[#{point.num}] ")
        try:
            return runs.execute(
                point.record, point.plan, point.request, wait=self.options.wait, out=out, interrupted=self.interrupted
            )
        except Exception as exc:  # this point's failure (the engine, the API): the others go on
            print(f"job {point.num} failed: {exc}", file=out)
            error = exc.one_line() if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
            return records.update(records.load(point.run_dir), status=FAILED, detail=error)

    def _record(self, point: Point, status: str) -> RunRecord:
        record = runs.new_record(
            point.plan,
            point.request,
            point.run_dir,
            point.request.image,
            num=point.num,
            overrides=list(point.overrides),
        )
        return dataclasses.replace(record, status=status)

    def _job_return(self, point: Point) -> JobReturn:
        record = point.record
        result = PointReturn(
            point,
            overrides=list(point.overrides),
            working_dir=str(point.run_dir) if point.run_dir else None,
            task_name=point.job_name,
            status=JobStatus.COMPLETED,
        )
        where = f"; see {point.run_dir}" if point.run_dir and point.run_dir.exists() else ""
        if record.status in (INVALID, FAILED, STOPPED):
            reason = record.detail or record.status
            result.fail(PointFailedError(f"job {point.num} ({' '.join(point.overrides)}): {reason}{where}"))
        elif record.status != COMPLETED:
            result.return_value = {"status": record.status, "run_id": record.run_id}
        elif self.options.objective is None:
            result.return_value = record.final
        elif isinstance(record.final.get(self.options.objective), int | float):
            result.return_value = float(record.final[self.options.objective])
        else:
            result.fail(
                PointFailedError(
                    f"job {point.num} reported no metric '{self.options.objective}' (hydra.launcher.objective){where}"
                )
            )
        return result


class _PointsConfig:
    """`cfg` (index 0) or `hydra_cfg` (1) of a PointReturn: the point's own, composed again when first read."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, result: "PointReturn | None", owner: type | None = None) -> Any:
        return self if result is None else result.point.configs()[self.index]

    def __set__(self, result: "PointReturn", value: DictConfig | None) -> None:
        if value is not None:  # JobReturn's __init__ sets None, which leaves the point's
            configs = list(result.point.configs())
            configs[self.index] = value
            result.point.cfg, result.point.hydra_cfg = configs


class PointReturn(JobReturn):
    """A point's JobReturn. Its `cfg` and `hydra_cfg` are the point's, composed again when first read where a
    worker prepared the point: nothing reads them in a dry run."""

    cfg = _PointsConfig(0)  # type: ignore[assignment]
    hydra_cfg = _PointsConfig(1)  # type: ignore[assignment]

    def __init__(self, point: Point, **fields: Any) -> None:
        self.point = point
        self.failure: PointFailedError | None = None
        super().__init__(**fields)

    def fail(self, failure: PointFailedError) -> None:
        """Failed: Hydra raises `failure` when the value is read (reading `return_value` here would raise it)."""
        self.status, self.return_value, self.failure = JobStatus.FAILED, failure, failure


def split_hydra_node(cfg: DictConfig) -> tuple[DictConfig, DictConfig]:
    """The task's config and `{"hydra": ...}`, as Hydra hands them to a JobReturn, made by moving the hydra
    node rather than copying it (a copy costs more than the rest of a dry-run point)."""
    hydra_node = cfg.hydra
    with open_dict(cfg):
        del cfg["hydra"]
    hydra_cfg = OmegaConf.create()
    with flag_override(hydra_cfg, "no_deepcopy_set_nodes", True):
        hydra_cfg.hydra = hydra_node
    return cfg, hydra_cfg


def _check_creatable(run_dir: Path) -> None:
    """A point's folder that cannot be made (`hydra.sweep.subdir` leads through a file or into a folder this
    user cannot write) is the point's error, found before anything is built or written."""
    there = next(p for p in [run_dir, *run_dir.parents] if p.exists())
    if not there.is_dir():
        why = "is a file"
    elif there != run_dir and not os.access(there, os.W_OK | os.X_OK):
        why = "is a folder this user cannot write in"
    else:
        return
    message = f"cannot create '{run_dir}': '{there}' {why}"
    raise ConfigError("hydra.sweep.subdir", message, "name a folder you can write")


def discard(sweep_dir: Path) -> None:
    """Remove an empty sweep folder Hydra made (its .hydra folder, then the folders left empty) up to the
    working directory."""
    shutil.rmtree(sweep_dir / ".hydra", ignore_errors=True)
    cwd, folder = Path.cwd().resolve(), sweep_dir
    while folder != cwd and cwd in folder.parents and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


class PrefixedWriter:
    """Lines from concurrent jobs, each whole and marked with its job (`[#3] algo-1 | ...`)."""

    lock = threading.Lock()

    def __init__(self, out: IO[str], prefix: str) -> None:
        self.out, self.prefix, self.pending = out, prefix, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            with self.lock:
                self.out.write("".join(f"{self.prefix}{line}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        with self.lock:
            self.out.flush()
