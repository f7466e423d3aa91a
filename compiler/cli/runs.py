"""`dockyard runs` and `dockyard status|logs|stop RUN`: find and follow runs after `launch`, by id from any
folder (the index, `compiler.targets.index`) or by folder.

The run record (`run.json`, see `compiler.targets.records`) says which target runs it and the handle that
target gave the job; the target answers from there (`compiler.targets.base.Target`).
"""

import argparse
import dataclasses
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NoReturn

from compiler.cli import show
from compiler.core import home
from compiler.launch import runs, summary
from compiler.launch.evaluation import latest_scores
from compiler.launch.progress import Progress, for_people, progress
from compiler.spec.errors import ConfigError, printable, shown
from compiler.spec.files import FileError
from compiler.targets import index, records, registry
from compiler.targets.base import FINAL_STATUSES, STATUSES
from compiler.targets.records import OPEN_STATUSES, RunRecord

TABLE, JSON = "table", "json"
SCORE_FIELDS = ("task", "metric", "value", "stderr")
"""A task score in `status -o json` (`dockyard eval`)."""
FOLLOW_POLL_S = 2.0
"""How often `logs -f` asks the target for new lines and the run's status."""


def find_record(run: str) -> RunRecord:
    folder = records.find(run)
    if folder is None:
        raise ConfigError(
            "run",
            f"no run '{run}' in {home.home() / index.RUNS} (set by ${home.VARIABLE})",
            "give a run id `dockyard runs` lists, or the run's folder",
        )
    return records.load(folder)


def say(line: str) -> None:
    """A line about a run, in the one printable form: a record's values (its id, the platform's detail)
    come from a file and a platform, and cannot forge or erase a line."""
    print(printable(line))


def progress_of(record: RunRecord) -> Progress:
    return progress(record, runs.loss_curve(Path(record.run_dir)), time.time())


def status(record: RunRecord, output: str = TABLE) -> None:
    record = runs.refresh(record)
    now = progress_of(record)
    results = {label: str(path) for label, path in runs.result_paths(Path(record.run_dir)).items()}
    if output == JSON:
        fields = {"image": record.image, "detail": record.detail, "exit_status": record.exit_status}
        counts = {"attempts": record.attempts, "restarts": record.restarts, "resumed": record.resumed}
        events = {"restart_events": runs.restart_events(Path(record.run_dir))}
        skipped = {"skipped_lines": runs.skipped_lines(Path(record.run_dir))}
        scores = [dict(zip(SCORE_FIELDS, row, strict=True)) for row in latest_scores(Path(record.run_dir))]
        shown_fields = {**now.to_json(), **fields, **counts, **events, **skipped, "scores": scores}
        print(json.dumps({**shown_fields, "results": results}, indent=2))
        return
    say(f"run       {record.run_id} ({record.target})")
    say(f"folder    {record.run_dir}")
    say(f"image     {record.image}")
    detail = f": {record.detail}" if record.detail else ""
    exit_text = "" if record.exit_status is None else f", exit status {record.exit_status}"
    restarts = f", {record.restarts} in-job restart(s)" if record.restarts else ""
    say(f"status    {record.status}{detail} after {record.attempts} attempt(s){restarts}{exit_text}")
    for event in runs.restart_events(Path(record.run_dir)):
        say(f"restart   {runs.restart_text(event)}")
    for path, lines in runs.skipped_lines(Path(record.run_dir)).items():
        say(f"skipped   {lines} unreadable line(s) of {path} (a node stopped mid-write?)")
    for label, text in show.status_lines(now):
        say(f"{label:<9} {text}")
    for task, metric, value, stderr in latest_scores(Path(record.run_dir)):
        say(f"score     {task} {metric} {value:.4f}" + ("" if stderr is None else f" ± {stderr:.4f}"))
    if record.warm_pool:
        say(f"warm pool {record.warm_pool}")
    if record.billable_s is not None:
        saving = "" if record.spot_saving is None else f", {record.spot_saving:.0%} saved by spot"
        say(f"billing   trained {record.training_s:.0f} s, billed {record.billable_s:.0f} s{saving}")
    for label, path in results.items():
        say(f"  {label:<11} {path}")


def logs(record: RunRecord, args: argparse.Namespace) -> None:
    """Every node's lines in time order (`--node`: one node's, `--tail N`: the last N; on a terminal,
    metrics lines as progress lines); `-f` then prints new lines as they come until the run ends (its
    record, asked of its target, is final)."""
    target = registry.get(record.target)
    lines = target.logs(record.handle)
    nodes = sorted({line.node for line in lines if line.node})
    if args.node and args.node not in nodes and nodes and not args.follow:
        raise ConfigError("--node", f"the run has no node '{args.node}'", f"give one of {', '.join(nodes)}")
    chosen = [line for line in lines if args.node in (None, line.node)]
    out = for_people(sys.stdout, record.steps) if record.steps else sys.stdout
    for line in chosen if args.tail is None else chosen[max(0, len(chosen) - args.tail) :]:
        print(line, file=out, flush=True)
    if args.follow:
        _follow(runs.refresh(record), Counter(line.node for line in chosen), args.node, out)


def _follow(record: RunRecord, printed: Counter, node: str | None, out: IO[str]) -> None:
    """Print each node's lines past those `printed` (a node's lines only grow) until the run ends; Ctrl-C
    stops following and leaves the run alone."""
    target = registry.get(record.target)
    try:
        while record.status in OPEN_STATUSES:
            time.sleep(FOLLOW_POLL_S)
            record = runs.refresh(records.load(Path(record.run_dir)))  # the launching process may have ended it
            seen: Counter = Counter()
            for line in target.logs(record.handle):
                if node in (None, line.node):
                    seen[line.node] += 1
                    if seen[line.node] > printed[line.node]:
                        print(line, file=out, flush=True)
            printed = seen
    except KeyboardInterrupt:
        return


def stop(record: RunRecord) -> None:
    record = runs.refresh(record)
    if record.status in FINAL_STATUSES:
        say(f"{record.run_id} had already ended ({record.status}); nothing to stop")
        return
    runs.stop(record)
    say(f"stopped   {record.run_id}")


def release_warm_pool(record: RunRecord) -> None:
    target = registry.get(record.target)
    if not target.capabilities.warm_pools:
        raise ConfigError("run", f"target={record.target} keeps no warm pools", "give a SageMaker run")
    target.release_warm_pool(record.handle)
    say(f"released  the warm pool of {record.run_id} (keep-alive set to 0)")


def list_runs(args: argparse.Namespace) -> None:
    """Every registered run, newest first; open ones are asked of their target (one that cannot be reached
    is listed as last recorded, with the error as its detail, so one lost cluster does not hide the rest)."""
    found, unreadable = records.registered()
    for error in unreadable:
        print(f"dockyard: warning: left out {error.one_line()}", file=sys.stderr)
    chosen = [record for record in found if args.target in (None, record.target)]
    rows = []
    for record in chosen:
        if record.status in OPEN_STATUSES:
            record = _refreshed(record)
        if args.status is None or record.status == args.status:
            rows.append(progress_of(record))
    rows = rows[: args.limit]
    if args.output == JSON:
        print(json.dumps([row.to_json() for row in rows], indent=2))
    else:
        print(show.runs_table(rows, time.time(), sys.stdout), end="")


def _refreshed(record: RunRecord) -> RunRecord:
    try:
        return runs.refresh(record)
    except Exception as error:  # any platform's client error: this run is shown as it was recorded
        return dataclasses.replace(record, detail=f"not reachable: {type(error).__name__}: {error}")


ACTIONS = {"stop": stop, "warm-pool": release_warm_pool}


def sweep_status(sweep_dir: Path, sort_by: str | None) -> None:
    """A sweep's folder: refresh the points still running, rewrite its summary (sorted by `sort_by`), print it."""
    summary.refresh(sweep_dir, sort_by)
    print((sweep_dir / summary.SUMMARY_MD).read_text(), end="")


class OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as one ConfigError line naming the option (argparse prints its whole usage)."""

    def error(self, message: str) -> NoReturn:
        option, colon, problem = message.removeprefix("argument ").partition(": ")
        if message.startswith("argument ") and colon:
            raise ConfigError(option.split("/")[-1], problem, f"`{self.prog} --help` lists the options")
        if message.startswith("the following arguments are required: "):
            raise ConfigError(
                message.rpartition(": ")[2].split(", ")[0], "is required", f"{self.format_usage().strip()}"
            )
        raise ConfigError("overrides", message, f"`{self.prog} --help` lists the options")


def count(text: str) -> int:
    """A number of runs or lines: a whole number, 0 or more, in ASCII digits (`int` also takes other
    scripts' digits, such as a full-width '２')."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number")
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give a count of 0 or more")
    return value


def node_name(text: str) -> str:
    """A node's name as the logs label it: not empty (which would match every line), printable."""
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a node's name (algo-2, n1, a pod's host)")
    return text


def main(verb: str, args: list[str]) -> None:
    parser = OneLineParser(prog=f"dockyard {verb}")
    if verb == "runs":
        parser.add_argument("--status", choices=STATUSES, help="only the runs in this status")
        parser.add_argument("--target", choices=registry.kinds(), help="only the runs on this target")
        parser.add_argument("--limit", type=count, metavar="N", help="the newest N runs")
    if verb in ("runs", "status"):
        parser.add_argument("-o", "--output", choices=(TABLE, JSON), default=TABLE, help="json: machine-readable")
    if verb == "runs":
        return list_runs(parser.parse_args(args))
    if verb == "logs":
        parser.add_argument("-f", "--follow", action="store_true", help="print new lines until the run ends")
        parser.add_argument("--tail", type=count, metavar="N", help="only the last N lines (before following)")
        parser.add_argument(
            "--node", type=node_name, metavar="NAME", help="only this node's lines (algo-2, n1, a pod's host)"
        )
    if verb == "status":
        parser.add_argument("--plot", action="store_true", help="draw RUN/loss.png from the metrics in its folder")
        parser.add_argument("--sort", choices=summary.SORTABLE, help="a sweep's table by this column, lowest first")
    if verb == "warm-pool":
        parser.add_argument("action", choices=["release"], help="release: set the pool's keep-alive to 0")
    parser.add_argument("run", help="the run id `launch` printed, or the run folder (a sweep's folder for status)")
    parsed = parser.parse_args(args)
    if verb == "status" and records.holds_file(Path(parsed.run), summary.SUMMARY_CSV):
        return sweep_status(Path(parsed.run), parsed.sort)
    record = find_record(parsed.run)
    with handle_checked(record):
        if verb == "status":
            status(record, parsed.output)
            if parsed.plot:
                draw_plot(record)
        elif verb == "logs":
            logs(record, parsed)
        else:
            ACTIONS[verb](record)


@contextmanager
def handle_checked(record: RunRecord) -> Iterator[None]:
    """A record's handle is the target's to read (`Target.submit` wrote it): one the target cannot use, a
    key missing from an edited or foreign record, is one line naming the record."""
    try:
        yield
    except KeyError as missing:
        raise FileError(
            "run",
            Path(record.run_dir) / records.RECORD_FILE,
            f"has no {missing} in the handle target={printable(record.target)} needs",
            "give a run dockyard launched",
        ) from None


def draw_plot(record: records.RunRecord) -> None:
    """`status RUN --plot`: the run's loss.png, from the metrics its nodes left so far in its folder."""
    path = runs.plot_run(Path(record.run_dir), record.run_id)
    if path is None:
        print(f"plot      none: no metrics in {record.run_dir} yet (a remote target keeps them in its output)")
    else:
        print(f"plot      {path}")
