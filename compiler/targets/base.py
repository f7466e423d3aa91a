"""The seam every target plugs into: what a place that runs plans must offer, and nothing else.

A target is one folder under `compiler/targets/` whose package exposes `TARGET`, an object with this
shape, plus one line in `compiler.targets.registry`. Everything outside the targets package reaches a
target through the registry and never asks which kind it is.

The split follows torchx's schedulers: `to_request` is a pure translator whose result renders itself
(`str(request)` is exactly what `submit` sends, so `--dry-run` prints it and golden files hold it), and
`submit`/`follow`/`status`/`logs`/`stop` are the thin I/O half.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from compiler.core.capabilities import Capabilities
from compiler.spec import Plan
from compiler.spec.contract import CHECKPOINT_MARKER
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Config
from compiler.targets.logs import LogLine

PENDING, RUNNING, COMPLETED, FAILED, STOPPED, CANCELLED = (
    "pending",
    "running",
    "completed",
    "failed",
    "stopped",
    "cancelled",
)
STATUSES = (PENDING, RUNNING, COMPLETED, FAILED, STOPPED, CANCELLED)
"""One set of statuses for a run on every target (and a sweep's points)."""
FINAL_STATUSES = (COMPLETED, FAILED, STOPPED, CANCELLED)


@dataclass(frozen=True, kw_only=True)
class JobState:
    """A job as its target reports it, in the shared statuses."""

    status: str
    detail: str = ""
    """The platform's own words (SageMaker's secondary status, Slurm's pending reason)."""
    exit_status: int | None = None
    attempts: int = 1
    metrics: Mapping[str, float] | None = None
    """Final metrics the platform collected (SageMaker's FinalMetricDataList), when it has them."""
    warm_pool: str = ""
    """The state of the instances the platform keeps after the job (a SageMaker warm pool), in one line."""
    billing: Mapping[str, float] | None = None
    """Seconds the platform trained and billed (`training_s`, `billable_s`), where it bills by them:
    with managed spot, SageMaker bills fewer seconds than it trained."""


@runtime_checkable
class Request(Protocol):
    """A target's request: `str(request)` is `to_json()`, exactly what `submit` sends."""

    @property
    def run_id(self) -> str: ...

    @property
    def image(self) -> str: ...

    def to_json(self) -> str: ...


class Target(Protocol):
    kind: str
    capabilities: Capabilities
    attached: bool
    """True when the job lives in the submitting process (local containers): it is always followed to its
    end and Ctrl-C stops it; False when the platform runs it (detaching leaves it running)."""

    def check(self, plan: Plan) -> list[str]:
        """The target's own rules: raise a ConfigError naming the key, or return warnings."""

    def account_defaults(self, config: Config) -> dict[str, object]:
        """Values for keys left unset that the caller's account decides (`image.registry` -> its ECR), as
        dotted keys; may ask the platform. `launch` and its dry run apply them before compiling; `plan` does
        not, so a plan alone never depends on who runs it."""

    def to_request(self, plan: Plan, image: str, *, run_id: str, run_dir: Path) -> Request:
        """Pure: everything as arguments, no environment, clock or I/O; raises ConfigError for what the
        target cannot run."""

    def image_reference(self, plan: Plan, planned: str) -> str:
        """The reference a dry run prints for the image the build will make (`planned` is its local tag):
        what `submit` will send, registry-qualified where the target pulls from a registry."""

    def preflight(self, request: Request) -> None:
        """Ask the platform, changing nothing, whether it would take `request` (a role, the buckets, the
        account's quotas); raise a ConfigError naming the key. `launch` and a sweep call it before building
        or pushing the image, so a refusal leaves nothing built, pushed or created."""

    def resume_checkpoints(self, run_id: str, run_dir: Path) -> list[str]:
        """The overrides that point a resumed attempt of run `run_id` (its folder `run_dir`) at the run's
        checkpoints; a ConfigError naming `--resume` when they cannot be reached from here."""

    def submit(self, request: Request, plan_json: str, *, out: IO[str]) -> dict:
        """Create the job (after `preflight`); returns the handle `follow`/`status`/`logs`/`stop` need (kept
        in the run record)."""

    def follow(self, request: Request, handle: dict, *, out: IO[str], interrupted) -> JobState | None:
        """Stream progress until the job ends (its final state) or `interrupted` (a threading.Event) is set:
        then None for a detached target, and the job stopped for an attached one."""

    def status(self, handle: dict) -> JobState: ...

    def notes(self, request: Request) -> list[str]:
        """What the platform would do with `request` beyond running it (a warm pool it would start on);
        `launch` and its dry run print them. May ask the platform."""

    def logs(self, handle: dict) -> list[LogLine]:
        """Every line the job's nodes have written so far, in time order (`compiler.targets.logs.merged`);
        `dockyard logs` filters, tails and follows them."""

    def stop(self, handle: dict) -> None: ...


def require_shared_checkpoint(run_id: str, run_dir: Path) -> list[str]:
    """For targets whose checkpoints are in the run folder, where the host sees them before launching."""
    if not any((run_dir / "checkpoints").glob(f"step-*/{CHECKPOINT_MARKER}")):
        raise ConfigError(
            "--resume",
            f"run {run_id} has no complete checkpoint in {run_dir / 'checkpoints'}",
            "set trainer.checkpoint_interval (or checkpoint_minutes) in the runs you mean to resume",
        )
    return []
