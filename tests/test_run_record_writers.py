"""Two writers of one run record: `dockyard stop` (and `status`, which asks the target first) reads the record
and writes it back unless it has ended, while the launching process may write the job's end at that moment.
The read and the write are one step under the record's lock, so the launch's final record is never lost."""

import threading
from pathlib import Path

from compiler.targets import records
from compiler.targets.base import COMPLETED, RUNNING, STOPPED
from compiler.targets.records import RunRecord

FINAL = {"step": 6, "loss": 2.5}


def running_record(folder: Path) -> RunRecord:
    return records.save(RunRecord(run_dir=str(folder), run_id="raced-run", target="local", status=RUNNING))


def test_the_launchs_end_written_while_stop_holds_the_record_is_kept(tmp_path, monkeypatch):
    """The interleaving that lost it: stop reads the open record, the launch writes its end, stop writes
    `stopped` over it. Stop is held between its read and its write until the launch has tried to write."""
    launched = running_record(tmp_path)
    stop_has_read, launch_tried = threading.Event(), threading.Event()
    read = records.load

    def read_then_wait(run_dir: Path) -> RunRecord:
        found = read(run_dir)
        stop_has_read.set()
        launch_tried.wait(timeout=60)
        return found

    monkeypatch.setattr(records, "load", read_then_wait)
    stopped: list[RunRecord] = []
    stop = threading.Thread(target=lambda: stopped.append(records.update_if_open(tmp_path, status=STOPPED)))
    stop.start()
    assert stop_has_read.wait(timeout=60)
    launch = threading.Thread(target=records.update, args=(launched,), kwargs={"status": COMPLETED, "final": FINAL})
    launch.start()
    launch.join(timeout=0.5)
    assert launch.is_alive(), "the launch's write waits for the lock that stop holds"
    launch_tried.set()
    stop.join(timeout=60)
    launch.join(timeout=60)
    monkeypatch.undo()

    assert stopped[0].status == STOPPED  # stop read an open record and stopped it
    ended = records.load(tmp_path)
    assert (ended.status, ended.final) == (COMPLETED, FINAL)  # then the launch wrote the job's end
    assert sorted(path.name for path in tmp_path.iterdir()) == [records.RECORD_FILE]


def test_a_record_that_has_ended_is_kept_as_it_is(tmp_path):
    records.update(running_record(tmp_path), status=COMPLETED, final=FINAL, exit_status=0)
    before = (tmp_path / records.RECORD_FILE).read_text()
    assert records.update_if_open(tmp_path, status=STOPPED).status == COMPLETED
    assert (tmp_path / records.RECORD_FILE).read_text() == before
