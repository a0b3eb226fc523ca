"""The lock file of a run directory (and of prepare-data's output prefix) is never half made: its name holds a
whole pid or nothing, whatever fails halfway (a full disk, an interrupt), and what an earlier run left behind
(an empty file, a stale pid, garbage) never blocks a later one."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from launcher import lock
from launcher.errors import UserError, shown


@pytest.fixture(autouse=True)
def _released(tmp_path):
    yield
    lock.release(tmp_path / ".launch.lock")


def _fail_writes(monkeypatch, error: BaseException) -> None:
    def write(fd, data):
        raise error

    monkeypatch.setattr(lock.os, "write", write)


def test_a_full_disk_while_writing_the_pid_leaves_no_lock_file_and_says_so(tmp_path, monkeypatch):
    _fail_writes(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(UserError) as refused:
        lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    problem = refused.value.problems[0]
    assert "No space left on device" in problem.message and problem.hint == "free space on that file system"
    assert os.listdir(tmp_path) == []  # no empty lock, no temporary


def test_a_full_disk_keeps_the_lock_file_an_earlier_run_left_whole(tmp_path, monkeypatch):
    (tmp_path / ".launch.lock").write_text("1234\n")
    _fail_writes(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(UserError, match="No space left on device"):
        lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    assert os.listdir(tmp_path) == [".launch.lock"]
    assert (tmp_path / ".launch.lock").read_text() == "1234\n"


@pytest.mark.parametrize("existing", [None, b"1234\n"])
def test_an_interrupt_while_writing_the_pid_leaves_the_name_as_it_was(tmp_path, monkeypatch, existing):
    if existing is not None:
        (tmp_path / ".launch.lock").write_bytes(existing)
    _fail_writes(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    assert os.listdir(tmp_path) == ([] if existing is None else [".launch.lock"])
    if existing is not None:
        assert (tmp_path / ".launch.lock").read_bytes() == existing


@pytest.mark.parametrize("left", [b"", b"99999\n", b"not a pid \xff\x00", b"1" * 100_000], ids=[
    "empty", "stale pid", "garbage", "100 KB"])
def test_a_lock_file_left_by_an_earlier_run_is_taken_over_and_names_this_process(tmp_path, left):
    (tmp_path / ".launch.lock").write_bytes(left)
    said = lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    assert said is not None and said.endswith("was taken over")
    assert ("of process 99999, which ended without removing it" in said if left == b"99999\n" else
            "left empty" in said if not left else "holding no process id" in said)
    assert (tmp_path / ".launch.lock").read_text() == f"{os.getpid()}\n"
    assert os.listdir(tmp_path) == [".launch.lock"]


def _hold_in_a_child(path, then: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from launcher import lock
        lock.hold({str(path)!r}, "run directory x", "wait")
        print("held", flush=True)
        {then}
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def test_a_held_lock_is_refused_naming_its_holder_and_a_killed_holder_blocks_no_later_run(tmp_path):
    path = tmp_path / ".launch.lock"
    child = _hold_in_a_child(path, "time.sleep(120)")
    try:
        with pytest.raises(UserError) as refused:
            lock.hold(path, "run directory x", "wait for it")
        assert refused.value.problems[0].message == f"run directory x is in use by process {child.pid} (lock {path})"
        assert refused.value.problems[0].hint == "wait for it"
    finally:
        child.kill()
        child.wait()
    lock.hold(path, "run directory x", "wait")  # SIGKILL left the file, not the lock
    assert path.read_text() == f"{os.getpid()}\n"
    assert os.listdir(tmp_path) == [".launch.lock"]


@pytest.mark.parametrize("make, kind", [(os.mkdir, "a directory"), (os.mkfifo, "a FIFO")])
def test_a_lock_name_taken_by_something_else_is_refused_saying_what_it_is(tmp_path, make, kind):
    make(tmp_path / ".launch.lock")
    with pytest.raises(UserError) as refused:
        lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    problem = refused.value.problems[0]
    assert problem.message == f"the lock file {shown(str(tmp_path / '.launch.lock'))} is not a regular file but {kind}"
    assert "remove it" in problem.hint
    assert sorted(os.listdir(tmp_path)) == [".launch.lock"]  # no temporary left beside it


def test_a_link_planted_as_the_lock_is_neither_followed_nor_replaced(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / ".launch.lock").symlink_to(victim)
    with pytest.raises(UserError, match="is a symbolic link"):
        lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    assert victim.read_text() == "keep\n" and (tmp_path / ".launch.lock").is_symlink()
    assert sorted(os.listdir(tmp_path)) == [".launch.lock", "victim"]


def test_a_file_system_without_hard_links_still_gets_a_whole_lock(tmp_path, monkeypatch):
    def no_links(*_args, **_kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(lock.os, "link", no_links)
    lock.hold(tmp_path / ".launch.lock", "run directory x", "wait")
    assert (tmp_path / ".launch.lock").read_text() == f"{os.getpid()}\n"
    assert os.listdir(tmp_path) == [".launch.lock"]


def test_a_released_and_removed_lock_leaves_nothing(tmp_path):
    assert lock.hold(tmp_path / ".launch.lock", "run directory x", "wait") is None  # a new lock: nothing to say
    lock.release(tmp_path / ".launch.lock", remove=True)
    assert os.listdir(tmp_path) == []
