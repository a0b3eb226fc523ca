"""prepare-data with worker processes, stopped as a user or a scheduler stops it: Ctrl-C (SIGINT to the whole
process group, as a terminal sends it) or SIGTERM (to the launcher alone, or to every process, as Slurm does).
It must end promptly, say why, exit 128 + the signal's number and leave no file behind, hidden ones included."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None,
                       reason="needs megatron-core and torch"),
]
REPO = Path(__file__).resolve().parents[2]
# Enough text that two workers are still busy when the signal comes (a few seconds of tokenizing).
CORPUS_LINES = 120_000
STARTUP_SECONDS = 120  # torch and megatron-core imports on a busy machine
STOP_SECONDS = 20  # generous: a hang is what this catches


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    text = "the quick brown fox jumps over the lazy dog " * 20
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": f"{text}{number}"}) + "\n" for number in range(CORPUS_LINES))
    return path


@pytest.mark.parametrize(("signum", "whole_group"), [(signal.SIGINT, True), (signal.SIGTERM, False),
                                                      (signal.SIGTERM, True), (signal.SIGHUP, False)],
                         ids=["ctrl-c", "sigterm-launcher", "sigterm-every-process", "sighup"])
def test_a_signal_stops_the_workers_and_leaves_no_file(tmp_path, corpus, signum, whole_group):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with _ctrl_c_as_in_a_terminal():
        proc = subprocess.Popen([sys.executable, "-m", "launcher", "prepare-data", str(corpus), "--output-prefix",
                                 str(out / "corpus"), "--tokenizer", "byte", "--workers", "2", "--no-progress"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        _wait_until_writing(out, proc)
        (os.killpg if whole_group else os.kill)(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=STOP_SECONDS)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signum, stderr
    assert f"error: prepare-data stopped by {'Ctrl-C (SIGINT)' if signum == signal.SIGINT else signum.name}" \
           f"; nothing was written" in stderr
    assert "Traceback" not in stderr and stdout == ""
    assert os.listdir(out) == []
    _assert_no_process_left(proc.pid)


@contextlib.contextmanager
def _ctrl_c_as_in_a_terminal() -> Iterator[None]:
    """The launcher starts with SIGINT at its default, as a terminal's foreground job does. A test session started
    in a shell's background (`pytest &`, nohup) ignores SIGINT, an ignored signal stays ignored across exec, and that
    launcher would rightly never see the Ctrl-C (seen: exit 0). A handler, unlike SIG_IGN, is reset at exec; no
    code runs between fork and exec (the xdist worker has threads)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait_until_writing(out: Path, proc: subprocess.Popen) -> None:
    """Until the hidden temporary .bin holds data: the workers are running and the parent is writing."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if any(entry.stat().st_size > 0 for entry in out.iterdir() if entry.name.endswith(".bin")):
            return
        if proc.poll() is not None:
            raise AssertionError(f"prepare-data ended before the signal: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("prepare-data wrote nothing in time")


def _assert_no_process_left(session: int) -> None:
    """No worker of the stopped run survives it (they share the session the test started); multiprocessing's
    resource tracker may take a moment to notice its parent is gone."""
    deadline = time.monotonic() + STOP_SECONDS
    while (left := _session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"processes of the stopped run still alive: {left}"


def _session_processes(session: int) -> list[str]:
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":  # fields[3]: the session id
                left.append(f"{entry.name} {command!r}")
    return left


def test_workers_are_started_with_ctrl_c_held_back(monkeypatch):
    # A Ctrl-C that reached a worker while it was still starting (before it ignores SIGINT) printed that
    # worker's KeyboardInterrupt traceback: the workers start with SIGINT blocked, the parent's mask restored after.
    import multiprocessing.context

    from launcher.dataprep import prepare

    masks = []

    def start(process):
        masks.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        raise KeyboardInterrupt  # stop here: no real worker is needed to see the mask

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    with pytest.raises(KeyboardInterrupt):
        next(prepare._encode_all(["unused"], None, None, "text", "document", 2, None, lambda: False))
    assert masks == [True]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
