"""The `tensorboard` sink: event files in the output folder's `tensorboard/` (`tensorboard --logdir RUN`
finds them; SageMaker uploads the folder to S3 as the job runs, by the request's TensorBoardOutputConfig)."""

from typing import Any

from compiler.spec.contract import TENSORBOARD_DIR
from entrypoint.trainer.metrics.base import RunEnd, Sample, TrackedRun, numbers, samples_markdown

SAMPLES_TAG = "samples"
"""The text panel's tag of the samples (`trainer.sample_prompts`), a table a step."""


class TensorBoardSink:
    def __init__(self, run: TrackedRun) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package, in the image when used

        self.writer = SummaryWriter(log_dir=str(run.output / TENSORBOARD_DIR))
        params = run.params()
        self.writer.add_text("plan", "\n".join(f"    {key} = {value}" for key, value in params.items()))

    def write(self, record: dict[str, Any]) -> None:
        for key, value in numbers(record).items():
            self.writer.add_scalar(key, value, global_step=record["step"])
        self.writer.flush()

    def write_samples(self, samples: list[Sample]) -> None:
        self.writer.add_text(SAMPLES_TAG, samples_markdown(samples), global_step=samples[0].step)
        self.writer.flush()

    def close(self, end: RunEnd) -> None:
        self.writer.close()
