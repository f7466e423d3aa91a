"""The `jsonl` sink: one JSON object per line, to stdout (the job's log, where SageMaker's metric regexes
look) and to `metrics.jsonl` in the output folder (which the run reader charts)."""

import json
import sys
from typing import Any, TextIO

from compiler.spec.contract import METRICS_FILE, METRICS_SEPARATORS
from entrypoint.trainer.metrics.base import RunEnd, TrackedRun


class JsonlSink:
    def __init__(self, run: TrackedRun, stream: TextIO = sys.stdout) -> None:
        run.output.mkdir(parents=True, exist_ok=True)
        self.file = (run.output / METRICS_FILE).open("a")
        self.stream = stream

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=METRICS_SEPARATORS)
        print(line, file=self.stream, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self, end: RunEnd) -> None:
        self.file.close()
