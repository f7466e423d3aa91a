"""The `wandb` sink: a W&B run in the project of `trainer.wandb`, its config the plan's parameters. Offline
(the default) it is a run folder under the output folder's `wandb/` (`compiler.spec.contract.WANDB_DIR`),
which `wandb sync` uploads; online it streams, with WANDB_API_KEY from the node's environment, where the
target puts it."""

from typing import Any

from entrypoint.trainer.metrics.base import RunEnd, Sample, TrackedRun, numbers

EXIT_CODE = {RunEnd.finished: 0, RunEnd.stopped: 255, RunEnd.failed: 1}
"""`Run.finish(exit_code)`: 0 finishes the run, any other code fails it; W&B's client has no call that marks a
run killed. 255 is the code W&B's own exit hook gives a run that Ctrl-C ended, 1 the one it gives an exception."""

SAMPLES_KEY = "samples"


class WandbSink:
    def __init__(self, run: TrackedRun) -> None:
        import wandb

        settings = run.plan.trainer.wandb
        run.output.mkdir(parents=True, exist_ok=True)  # wandb.init writes its run folders into its `wandb/`
        params = run.params()
        self.run = wandb.init(
            project=settings.project,
            mode=settings.mode.value,
            dir=str(run.output),
            name=run.run_id,
            config=params,
            tags=[params["plan_hash"][:12]],
            settings=wandb.Settings(silent=True, console="off"),
        )

    def write(self, record: dict[str, Any]) -> None:
        self.run.log(numbers(record), step=record["step"])

    def write_samples(self, samples: list[Sample]) -> None:
        """The samples as a W&B Table logged under `samples` at their step (a table a step)."""
        import wandb

        rows = [[sample.step, sample.prompt, sample.completion] for sample in samples]
        self.run.log(
            {SAMPLES_KEY: wandb.Table(columns=["step", "prompt", "completion"], data=rows)}, step=samples[0].step
        )

    def close(self, end: RunEnd) -> None:
        self.run.finish(exit_code=EXIT_CODE[end])
