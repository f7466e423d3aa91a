"""Large files' digests for the image tag are kept (`compiler.images.digests`): read once, hashed again
after any write, never kept while the file may still be changing within one tick of the clock."""

import hashlib
import os
import time

import pytest

from compiler.images import digests


@pytest.fixture
def reads(monkeypatch):
    """The files read and hashed, in order."""
    read = digests._read
    calls = []
    monkeypatch.setattr(digests, "_read", lambda path: calls.append(path.name) or read(path))
    return calls


def large_file(tmp_path, fill=b"a"):
    path = tmp_path / "torch-2.10.0-cp311-linux_x86_64.whl"
    path.write_bytes(fill * digests.MIN_BYTES)
    return path


def test_a_large_file_is_read_once(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(digests, "RACY_S", 0)
    wheel = large_file(tmp_path)
    expected = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digests.file_sha256(wheel) == digests.file_sha256(wheel) == expected
    assert reads == [wheel.name]


def test_a_write_to_the_file_hashes_it_again_even_with_its_old_times(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(digests, "RACY_S", 0)
    wheel = large_file(tmp_path)
    digests.file_sha256(wheel)
    before = wheel.stat()
    time.sleep(0.05)  # past a tick of the file system's clock
    wheel.write_bytes(b"b" * digests.MIN_BYTES)
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert digests.file_sha256(wheel) == hashlib.sha256(b"b" * digests.MIN_BYTES).hexdigest()
    assert len(reads) == 2


def test_a_file_changed_in_the_last_seconds_is_not_kept(tmp_path, reads):
    wheel = large_file(tmp_path)
    digests.file_sha256(wheel)
    digests.file_sha256(wheel)
    assert len(reads) == 2 and not digests.folder().exists()


def test_small_files_are_read_each_time(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(digests, "RACY_S", 0)
    code = tmp_path / "train.py"
    code.write_text("print('hi')\n")
    assert digests.file_sha256(code) == digests.file_sha256(code) == hashlib.sha256(code.read_bytes()).hexdigest()
    assert len(reads) == 2 and not digests.folder().exists()


def test_an_unwritable_home_costs_only_the_read(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(digests, "RACY_S", 0)
    home = tmp_path / "home"
    home.write_text("a file where the folder would be")
    monkeypatch.setenv("DOCKYARD_HOME", str(home))
    wheel = large_file(tmp_path)
    assert digests.file_sha256(wheel) == digests.file_sha256(wheel) == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert len(reads) == 2
