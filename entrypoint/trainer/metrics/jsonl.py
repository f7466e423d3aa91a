"""The `jsonl` sink: one JSON object per line, to stdout (the job's log, where SageMaker's metric regexes
look) and to `metrics.jsonl` in the output folder (which the run reader charts); the samples of
`trainer.sample_prompts` to `samples.jsonl` beside it (the log has them as readable lines already)."""

import json
import sys
from typing import Any, TextIO

from compiler.spec.contract import METRICS_FILE, METRICS_SEPARATORS, SAMPLES_FILE
from entrypoint.trainer.metrics.base import RunEnd, Sample, TrackedRun, samples_jsonl


class JsonlSink:
    def __init__(self, run: TrackedRun, stream: TextIO = sys.stdout) -> None:
        run.output.mkdir(parents=True, exist_ok=True)
        self.file = (run.output / METRICS_FILE).open("a")
        self.samples = run.output / SAMPLES_FILE
        self.stream = stream

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=METRICS_SEPARATORS)
        print(line, file=self.stream, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def write_samples(self, samples: list[Sample]) -> None:
        with self.samples.open("a") as file:
            file.write(samples_jsonl(samples))

    def close(self, end: RunEnd) -> None:
        self.file.close()
