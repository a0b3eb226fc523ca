"""A launch here when things go wrong around it: launches in the same second, a closed terminal (SIGHUP),
a run_root that cannot be used, a disk that fills up. The launcher must keep every run apart, stop training
it can no longer record, write what it can and exit 2 with error/hint lines, never a traceback.

torchrun is a stand-in (a small script) that prints lines, writes Megatron's tracker file where --save points,
and, when signalled, records the signal in a file beside itself and exits 128 + its number as torchrun does.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.runs import rundir

ROOT = Path(__file__).resolve().parents[2]
NOW = rundir.datetime(2026, 11, 29, 16, 1, 50, tzinfo=rundir.UTC)
WAIT_SECONDS = 60  # generous bounds: what these catch is a hang or a launcher that never ends


def stand_in(tmp_path: Path, lines: int = 3, line_bytes: int = 20, seconds_per_line: float = 0.0,
             replay: str | None = None) -> Path:
    """The stand-in torchrun; `replay` names a recorded Megatron log (tests/fixtures/logs) it prints at the end."""
    script = tmp_path / "torchrun-stand-in"
    replay_path = str(ROOT / "tests" / "fixtures" / "logs" / replay) if replay else ""
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, pathlib, signal, sys, time
        here = pathlib.Path(__file__).parent
        def stop(signum, _frame):
            (here / "signalled").write_text(signal.Signals(signum).name)
            sys.exit(128 + signum)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
        (here / "child.pid").write_text(str(os.getpid()))
        argv = sys.argv[1:]
        if "--save" in argv:
            save = pathlib.Path(argv[argv.index("--save") + 1])
            save.mkdir(parents=True, exist_ok=True)
            (save / "latest_checkpointed_iteration.txt").write_text("100")
        for number in range({lines}):
            print(f"line {{number}} " + "x" * {line_bytes}, flush=True)
            time.sleep({seconds_per_line})
        if {replay_path!r}:
            sys.stdout.write(open({replay_path!r}).read())
        """))
    script.chmod(0o755)
    return script


def environment() -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(ROOT)}


def launch_argv(tmp_path: Path, torchrun: Path, run_root: Path, *extra: str) -> list[str]:
    """`launch toy` here with the stand-in; train_iters matches the replayed log, which reaches its end."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir(exist_ok=True)
    (megatron / "pretrain_gpt.py").touch()
    return [sys.executable, "-m", "launcher", "toy", "--set", f"torchrun={torchrun}", "--set",
            f"run_root={run_root}", "--set", "train_iters=100", "--megatron-path", str(megatron), "--no-doctor", *extra]


def launch(tmp_path: Path, torchrun: Path, run_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(launch_argv(tmp_path, torchrun, run_root), cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)


def assert_clean_error(result: subprocess.CompletedProcess, *phrases: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "error: " in result.stderr and "hint: " in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


# ---- launches in the same second ----

def test_simultaneous_launches_each_get_their_own_directory(tmp_path):
    torchrun = stand_in(tmp_path, replay="toy_fp32_1gpu.log")
    runs = tmp_path / "runs"
    procs = [subprocess.Popen(launch_argv(tmp_path, torchrun, runs), cwd=tmp_path, env=environment(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(proc.wait(timeout=WAIT_SECONDS), *proc.communicate()) for proc in procs]
    for code, _, err in results:
        assert code == 0, err
    made = sorted(runs.iterdir())
    assert len(made) == 4 and all(path.name.startswith("toy-") for path in made), made
    for run_dir in made:  # each complete, and each run's checkpoints in its own directory
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert str(run_dir / "checkpoints") in manifest["attempts"][0]["argv"]
        assert (run_dir / "summary.json").is_file()


def test_the_same_name_chosen_at_once_is_given_once(tmp_path):
    """Eight launches that all pick the same second's name: mkdir hands each a different directory, and each
    one's complete directory lands where it was promised (the command already points --save there)."""
    barrier, made, errors = threading.Barrier(8), [], []

    def one_launch() -> None:
        barrier.wait()
        try:
            path = rundir.reserve_run_dir(tmp_path / "runs", "toy", NOW)
            made.append(rundir.write_run_dir(path, preset={"name": "toy"}, manifest={"run": path.name},
                                             argv=["torchrun"], env={}))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=one_launch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(path.name for path in made) == sorted(
        ["toy-20261129T160150Z", *(f"toy-20261129T160150Z-{n}" for n in range(2, 9))])
    for path in made:
        assert json.loads((path / "manifest.json").read_text()) == {"run": path.name}
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == sorted(path.name for path in made)


def test_a_failed_launch_gives_its_reserved_directory_back(tmp_path):
    result = launch(tmp_path, tmp_path / "no-such-torchrun", tmp_path / "runs")
    assert result.returncode == 2 and "is not on PATH" in result.stderr
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


# ---- a closed terminal ----

def test_sighup_is_passed_to_training_and_the_summary_is_written(tmp_path):
    torchrun = stand_in(tmp_path, lines=600, seconds_per_line=0.05)
    proc = subprocess.Popen(launch_argv(tmp_path, torchrun, tmp_path / "runs"), cwd=tmp_path,
                            env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if line.startswith("line 2 "):  # training runs and its output comes through the launcher
                break
        proc.stdout.close()  # as a closed terminal: whatever the launcher prints from now on goes nowhere
        os.kill(proc.pid, signal.SIGHUP)
        code = proc.wait(timeout=WAIT_SECONDS)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = proc.stderr.read()
    assert code == 128 + signal.SIGHUP, stderr
    assert (tmp_path / "signalled").read_text() == "SIGHUP"
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 128 + signal.SIGHUP
    assert "Traceback" not in stderr
    assert not _outlives_the_wait(int((tmp_path / "child.pid").read_text()))


# ---- run_root that cannot be used ----

def test_run_root_that_is_a_file(tmp_path):
    (tmp_path / "runs").write_text("not a directory")
    assert_clean_error(launch(tmp_path, stand_in(tmp_path), tmp_path / "runs"), "is a file, not a directory",
                       "--set run_root=")


def test_run_root_under_proc(tmp_path):
    assert_clean_error(launch(tmp_path, stand_in(tmp_path), Path("/proc/megatron-launch-runs")),
                       "cannot create run_root /proc/megatron-launch-runs")


def test_run_root_on_a_read_only_mount(tmp_path):
    mount = tiny_tmpfs(tmp_path / "ro", "size=64k,ro")
    assert_clean_error(launch(tmp_path, stand_in(tmp_path), mount / "runs"), "Read-only file system",
                       "--set run_root=")


# ---- a full disk ----

def test_full_disk_while_creating_the_run_directory(tmp_path):
    mount = tiny_tmpfs(tmp_path / "full", "size=64k")
    _fill(mount / "filler")
    result = launch(tmp_path, stand_in(tmp_path), mount)
    assert_clean_error(result, "No space left on device", "free space")
    assert os.listdir(mount) == ["filler"]  # no staging directory, no reserved name left behind
    assert not (tmp_path / "child.pid").exists()  # training never started


def test_full_disk_while_logging_stops_training_and_exits_2(tmp_path):
    mount = tiny_tmpfs(tmp_path / "full", "size=64k")
    torchrun = stand_in(tmp_path, lines=2000, line_bytes=200, seconds_per_line=0.002)  # ~400 KB of log
    result = launch(tmp_path, torchrun, mount)
    assert_clean_error(result, "so training was stopped", "No space left on device", "free space")
    assert (tmp_path / "signalled").read_text() == "SIGTERM"
    assert not _outlives_the_wait(int((tmp_path / "child.pid").read_text()))


def test_a_log_that_cannot_be_written_stops_training_and_the_summary_is_still_written(tmp_path, monkeypatch):
    """The same fault where only the log fails: summary.json is still written, training is stopped."""
    from dataclasses import replace

    from launcher.backends import local_run
    from launcher.pipeline import resolve
    from launcher.pipeline.command import build_command
    from launcher.pipeline.preset import load_preset
    from launcher.runs.monitor import Monitor

    torchrun = stand_in(tmp_path, lines=500, seconds_per_line=0.01)
    run_dir = rundir.reserve_run_dir(tmp_path / "runs", "toy")
    job = resolve.resolve(load_preset("toy", [f"torchrun={torchrun}"]), 1, 1, megatron_path=ROOT, run_dir=run_dir)
    command = build_command(job)
    command = replace(command, argv=[str(torchrun), *command.argv[command.argv.index("--save"):]])
    feed, fed = Monitor.feed, []

    def feed_until_the_disk_is_full(self, line):
        fed.append(line)
        if len(fed) == 5:
            raise OSError(28, "No space left on device")
        feed(self, line)

    monkeypatch.setattr(Monitor, "feed", feed_until_the_disk_is_full)
    with pytest.raises(UserError) as caught:
        local_run.execute(job, command, out=io.StringIO())
    assert "so training was stopped: No space left on device" in caught.value.problems[0].message
    assert (tmp_path / "signalled").read_text() == "SIGTERM"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] is None


# ---- helpers ----

def tiny_tmpfs(path: Path, options: str) -> Path:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    _mounted.append(path)
    return path


_mounted: list[Path] = []


@pytest.fixture(autouse=True)
def _unmount():
    yield
    while _mounted:
        subprocess.run(["umount", str(_mounted.pop())], check=False)


def _fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass


def _outlives_the_wait(pid: int) -> bool:
    """Whether the process is still running after WAIT_SECONDS (it may take a moment to end)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def test_an_interrupted_summary_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from launcher import nofollow
    from launcher.runs import atomic

    summary = tmp_path / "summary.json"
    summary.write_text('{"outcome": "stopped"}\n')

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nofollow.os, "replace", interrupted)  # the rename every atomic write ends with
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text_atomic(summary, '{"outcome": "success"}\n')
    assert summary.read_text() == '{"outcome": "stopped"}\n'
    assert os.listdir(tmp_path) == ["summary.json"]


# ---- a run root made read-only while training runs ----

def _make_read_only(path: Path) -> str:
    """Make `path` refuse new files from now on, as a run root that turns read-only does. As root (where chmod
    changes nothing) a read-only bind mount is stacked over it: files already open for writing (the attempt
    log, metrics.jsonl) keep working, as on a real remount, and every new file or removal gets EROFS. Without
    root, the directory loses its write permission (EACCES, the same path through the launcher)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return "chmod"
    for args in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]):
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()}")
        if args[1] == "--bind":
            _mounted.append(path)
    return "mount"


def test_a_run_directory_made_read_only_mid_run_keeps_its_records_and_exits_2(tmp_path):
    torchrun = stand_in(tmp_path, lines=40, seconds_per_line=0.05, replay="toy_fp32_1gpu.log")
    runs = tmp_path / "runs"
    proc = subprocess.Popen(launch_argv(tmp_path, torchrun, runs), cwd=tmp_path, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("line 2 "):  # training runs, its run directory is written
                break
        (run_dir,) = runs.iterdir()
        manifest_before = (run_dir / "manifest.json").read_bytes()
        how = _make_read_only(run_dir)
        out, err = proc.communicate(timeout=WAIT_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_clean_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                       "training ended (exit status 0)", "could not be completed", f"launch report {run_dir}")
    assert "so training was stopped" not in err  # it was not: training ran to its end
    assert "outcome:            success" in out  # the summary is printed even though it could not be stored
    if how == "mount":
        subprocess.run(["umount", str(_mounted.pop())], check=True)
    else:
        run_dir.chmod(0o755)
    # nothing written before the fault is lost or half written, and no temporary is left behind
    assert (run_dir / "manifest.json").read_bytes() == manifest_before
    assert not (run_dir / "summary.json").exists()
    assert not [name for name in os.listdir(run_dir) if name.endswith(".tmp")]
    records = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert records and all(json.loads(record) for record in records)
    # the record the hint promises: report writes summary.json from the log once the directory is writable
    report = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir), "--output-dir",
                             str(tmp_path / "plots")], cwd=tmp_path, env=environment(), capture_output=True,
                            text=True, timeout=WAIT_SECONDS, check=False)
    assert report.returncode == 0, report.stderr
    assert json.loads((run_dir / "summary.json").read_text())["outcome"] == "success"


# ---- a resumed attempt on a disk that fills up ----

def test_a_resume_that_fills_the_disk_keeps_every_earlier_record_whole(tmp_path):
    """The earlier attempt's records (manifest, summary, log, metrics) stay whole; the manifest gains the new attempt
    whole or not at all; and the earlier summary.json, which the new attempt could not replace, is not read as how
    the run ended (`launch runs` said "succeeded" for a run whose last attempt the launcher stopped)."""
    mount = tiny_tmpfs(tmp_path / "full", "size=1m")
    first = launch(tmp_path, stand_in(tmp_path, replay="toy_fp32_1gpu.log"), mount)
    assert first.returncode == 0, first.stderr
    (run_dir,) = mount.iterdir()
    kept = {name: (run_dir / name).read_bytes() for name in ("summary.json", "metrics.jsonl", "logs/attempt-1.log",
                                                            "preset.yaml", "command.sh")}
    attempts = json.loads((run_dir / "manifest.json").read_text())["attempts"]
    _fill(mount / "filler")
    os.truncate(mount / "filler", os.path.getsize(mount / "filler") - 150_000)  # room for the start, not the log
    torchrun = stand_in(tmp_path, lines=2000, line_bytes=200, seconds_per_line=0.001)
    resumed = subprocess.run([sys.executable, "-m", "launcher", "--resume", str(run_dir), "--set",
                              f"torchrun={torchrun}", "--megatron-path", str(tmp_path / "megatron-lm"), "--no-doctor"],
                             cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=WAIT_SECONDS,
                             check=False)
    assert_clean_error(resumed, "so training was stopped", "No space left on device")
    (mount / "filler").unlink()
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept
    assert json.loads((run_dir / "manifest.json").read_text())["attempts"][:-1] == attempts  # one attempt more
    assert not [name for name in os.listdir(run_dir) if name.endswith(".tmp")]
    listed = subprocess.run([sys.executable, "-m", "launcher", "runs", "--run-root", str(mount), "--format", "json"],
                            cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=WAIT_SECONDS,
                            check=False)
    [row] = json.loads(listed.stdout)
    assert row["state"] == "failed" and "summary.json is an earlier attempt's" in row["why"], row
