"""How a sweep ends badly, as the CLI reports it (`compiler.cli.main`) and the sweep raises it
(`compiler.sweep.launcher`): here so that neither imports the other."""

from compiler.spec.errors import ConfigError


class InvalidSweepError(ConfigError):
    """Some points cannot run; `points` has one line for each (job, overrides, key and reason)."""

    def __init__(self, points: list[str], total: int) -> None:
        super().__init__(
            "sweep",
            f"{len(points)} of {total} points are invalid, nothing was launched",
            "fix them, or set hydra.launcher.skip_invalid=true to run the others",
        )
        self.points = points


class PointFailedError(Exception):
    """A point that did not complete; the JobReturn's value, which Hydra's sweepers raise. They raise the first
    failed point's only, so that one carries the batch's other failures (`also`) and each is reported."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.also: list[PointFailedError] = []
