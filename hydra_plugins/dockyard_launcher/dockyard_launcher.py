"""The launcher Hydra instantiates for `hydra/launcher=dockyard`.

For dockyard's own `launch` task it hands the whole batch to `compiler.sweep.launcher`, which validates every point
before anything runs, builds each image once and submits the jobs to the plan's target. Any other task
function runs exactly as under Hydra's basic launcher, one job after the other. Everything heavy is
imported in `launch()`, so Hydra's plugin scan at start-up stays cheap.
"""

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class DockyardLauncher(Launcher):
    def __init__(
        self, max_concurrent: int, skip_invalid: bool, dry_run: bool, wait: bool, objective: str | None
    ) -> None:
        self.options = {
            "max_concurrent": max_concurrent,
            "skip_invalid": skip_invalid,
            "dry_run": dry_run,
            "wait": wait,
            "objective": objective,
        }
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None
        self.sweep = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def validates_every_point(self) -> bool:
        """True when the batch goes to `compiler.sweep.launcher`, which composes and checks every point first."""
        from compiler.launch import modes

        return modes.mode_of(self.task_function) is not None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from compiler.launch import modes
        from compiler.sweep import launcher

        mode = modes.mode_of(self.task_function)
        if mode is None:
            return self._launch_basic(job_overrides, initial_job_idx)
        if self.sweep is None:  # kept across batches (Optuna launches one batch of trials at a time)
            options = launcher.Options(**{**self.options, "dry_run": self.options["dry_run"] or mode == modes.DRY_RUN})
            self.sweep = launcher.Sweep(self.hydra_context.config_loader, self.config, options)
        return self.sweep.launch(job_overrides, initial_job_idx)

    def _launch_basic(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra._internal.core_plugins.basic_launcher import BasicLauncher

        basic = BasicLauncher()
        basic.setup(hydra_context=self.hydra_context, task_function=self.task_function, config=self.config)
        return basic.launch(job_overrides, initial_job_idx)
