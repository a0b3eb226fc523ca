"""`launch runs` / `launch ls`: every run directory under the run root with its preset, start, state, last
iteration and tokens/s, as a table and as JSON."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.runs.listing import describe
from launcher.runs.rundir import write_run_dir

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def make_run(root: Path, name: str, started: str, *, summary: dict | None = None, running: dict | None = None,
             metrics: list[dict] | None = None, sbatch: bool = False) -> Path:
    run_dir = write_run_dir(root / name, preset={"name": "toy"}, argv=["x"], env={},
                            manifest={"preset": name.split("-")[0], "created": started,
                                      "attempts": [{"started": started}]},
                            extra_files={"job.sbatch": "#!/bin/bash\n"} if sbatch else None)
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    if running is not None:
        (run_dir / "running.json").write_text(json.dumps(running))
    if metrics is not None:
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run_dir


def summary(outcome: str, last: int, total: int, speed: float | None) -> dict:
    return {"outcome": outcome, "last_iteration": last, "train_iters": total, "steady_tokens_per_s": speed}


@pytest.fixture
def live_launcher():
    """A process whose command line says launch, as a running `launch 345m` does."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "launch"])
    deadline = time.monotonic() + 30
    while b"launch" not in Path(f"/proc/{process.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)  # until it runs as itself
    yield process.pid
    process.kill()
    process.wait()


def finished_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_states_from_summary_pid_and_slurm_script(tmp_path, live_launcher):
    host = socket.gethostname()
    make_run(tmp_path, "345m-20261201T100000Z", "2026-12-01T10:00:00+00:00",
             summary=summary("success", 1000, 1000, 188430.4))
    make_run(tmp_path, "345m-20261201T110000Z", "2026-12-01T11:00:00+00:00", summary=summary("failed", 37, 200, None))
    make_run(tmp_path, "345m-20261201T120000Z", "2026-12-01T12:00:00+00:00",
             summary=summary("stopped", 500, 1000, 150000.0))
    make_run(tmp_path, "toy-20261201T130000Z", "2026-12-01T13:00:00+00:00",
             running={"pid": live_launcher, "host": host},
             metrics=[{"kind": "iteration", "iteration": 3, "train_iters": 5, "tokens_per_s": 1234.5}])
    make_run(tmp_path, "toy-20261201T140000Z", "2026-12-01T14:00:00+00:00",
             running={"pid": finished_pid(), "host": host})
    make_run(tmp_path, "175b-20261201T150000Z", "2026-12-01T15:00:00+00:00", sbatch=True)
    (tmp_path / "not-a-run").mkdir()
    done = subprocess.run([sys.executable, "-m", "launcher", "runs", "--run-root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False, env=ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "run                    preset  started                    state      iteration  tokens/s",
        "175b-20261201T150000Z  175b    2026-12-01T15:00:00+00:00  written    -          -",
        "toy-20261201T140000Z   toy     2026-12-01T14:00:00+00:00  failed     -          -",
        "toy-20261201T130000Z   toy     2026-12-01T13:00:00+00:00  running    3/5        1,234",
        "345m-20261201T120000Z  345m    2026-12-01T12:00:00+00:00  preempted  500/1000   150,000",
        "345m-20261201T110000Z  345m    2026-12-01T11:00:00+00:00  failed     37/200     -",
        "345m-20261201T100000Z  345m    2026-12-01T10:00:00+00:00  succeeded  1000/1000  188,430",
    ]
    listed = subprocess.run([sys.executable, "-m", "launcher", "ls", "--run-root", str(tmp_path), "--format",
                             "json"], capture_output=True, text=True, timeout=120, check=False, env=ENV)
    rows = {Path(row["run_dir"]).name: row for row in json.loads(listed.stdout)}
    assert rows["toy-20261201T140000Z"]["why"].endswith("is gone without a summary")
    assert rows["345m-20261201T100000Z"] == {
        "run_dir": str(tmp_path / "345m-20261201T100000Z"), "preset": "345m",
        "started": "2026-12-01T10:00:00+00:00", "state": "succeeded", "last_iteration": 1000, "train_iters": 1000,
        "tokens_per_s": 188430.4, "why": "", "failure": None}


def test_a_resumed_run_that_is_running_is_running_despite_its_old_summary(tmp_path, live_launcher):
    run_dir = make_run(tmp_path, "345m-20261201T100000Z", "2026-12-01T10:00:00+00:00",
                       summary=summary("stopped", 500, 1000, 1.0),
                       running={"pid": live_launcher, "host": socket.gethostname()})
    assert describe(run_dir).state == "running"


def test_a_missing_run_root_is_an_error_with_a_hint(tmp_path):
    done = subprocess.run([sys.executable, "-m", "launcher", "runs", "--run-root", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120, check=False, env=ENV)
    assert done.returncode == 2
    assert done.stderr == (f"error: no run directory root at {tmp_path / 'none'}\n  hint: runs go under ./runs by "
                           "default; give another with --run-root DIR\n")


def test_no_runs_yet_under_the_default_root_is_not_an_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "launcher", "runs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False, env=ENV)
    assert (done.returncode, done.stdout, done.stderr) == (0, "no runs under runs/ yet\n", "")


def _runs_json(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "runs", "--run-root", str(tmp_path), "--format", "json"],
                          env=ENV, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("record", ['{"outcome": "success", "last_iteration": NaN, "steady_tokens_per_s": Infinity}',
                                    '{"outcome": "success", "steady_tokens_per_s": 1e400}',
                                    '{"outcome": "success", "last_iteration": ' + "9" * 4000 + "}",
                                    "[" * 10000 + "]" * 10000])
def test_damaged_records_are_listed_as_valid_json(tmp_path, record):
    run_dir = make_run(tmp_path, "toy-20261130T100000Z", "2026-11-30T10:00:00+00:00")
    (run_dir / "summary.json").write_text(record)
    (run_dir / "metrics.jsonl").write_text(
        '{"kind": "iteration", "iteration": NaN, "tokens_per_s": Infinity}\n'
        '{"kind": "iteration", "iteration": 1e400}\n')
    done = _runs_json(tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the output"))
    assert row["tokens_per_s"] is None and row["last_iteration"] is None


@pytest.mark.parametrize("pid", [0, -1, 10**30, 1.5, True, "123"])
def test_a_running_json_with_an_impossible_pid_is_not_running(tmp_path, pid):
    make_run(tmp_path, "toy-20261130T100000Z", "2026-11-30T10:00:00+00:00",
             running={"pid": pid, "host": socket.gethostname()})
    done = _runs_json(tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["state"] in ("failed", "unknown")


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json", "running.json"])
def test_a_fifo_in_a_run_directory_does_not_hang_the_listing(tmp_path, name):
    run_dir = make_run(tmp_path, "toy-20261130T100000Z", "2026-11-30T10:00:00+00:00")
    os.mkfifo(run_dir / name)
    done = _runs_json(tmp_path)  # times out after 60 s
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_run_directory_is_listed_without_an_internal_error(tmp_path):
    run_dir = make_run(tmp_path, "toy-20261130T100000Z", "2026-11-30T10:00:00+00:00")
    run_dir.chmod(0)
    try:
        done = _runs_json(tmp_path)
    finally:
        run_dir.chmod(0o755)
    assert done.returncode == 0 and "internal error" not in done.stderr


# ---- bounded work per run, however large its files ----

def _big_records(directory: Path) -> dict[str, Path]:
    """Records of about 1 MiB each (a manifest of 1,000,000 bytes, after hundreds of resumes: within what a
    resume reads), valid JSON, in the launcher's member order (preset and created first, attempts last)."""
    directory.mkdir()
    attempt = {"started": "2026-12-01T00:00:00+00:00", "argv": ["--num-layers", "2"] * 100, "env": {"A": "b"}}
    manifest = {"entry": "pretrain_gpt", "format": 1, "preset": "big", "created": "2026-11-30T00:00:00+00:00",
                "attempts": [attempt] * 200}
    text = json.dumps(manifest, indent=2)
    line = json.dumps({"kind": "iteration", "iteration": 7, "train_iters": 9, "tokens_per_s": 5.0}) + "\n"
    files = {"manifest.json": text + " " * (1_000_000 - len(text)),
             "summary.json": json.dumps({"outcome": "success", "reasons": ["x" * (1 << 20)]}),
             "running.json": json.dumps({"pid": 1, "host": "h" * (1 << 20)}),
             "metrics.jsonl": line * ((1 << 20) // len(line) + 1)}
    for name, content in files.items():
        (directory / name).write_text(content)
        assert (directory / name).stat().st_size >= 1_000_000
    return {name: directory / name for name in files}


def test_listing_reads_a_bounded_number_of_bytes_per_run(tmp_path, monkeypatch):
    """2,000 runs whose every record is ≈ 1 MiB (hard links to one set: 8 GB as a reader sees it): the listing
    reads at most RUN_READ_BYTES of each run, and still shows the preset of an overlong manifest."""
    from launcher import untrusted
    from launcher.runs import listing

    records = _big_records(tmp_path / "records")
    root = tmp_path / "runs"
    root.mkdir()
    runs = 2000
    for number in range(runs):
        run_dir = root / f"big-{number:05d}"
        run_dir.mkdir()
        for name, path in records.items():
            os.link(path, run_dir / name)
    read, real_read = [0], untrusted.os.read

    def counted(fd, size):
        data = real_read(fd, size)
        read[0] += len(data)
        return data

    monkeypatch.setattr(untrusted.os, "read", counted)
    rows = listing.list_runs(root)
    assert len(rows) == runs
    assert read[0] / runs <= 256 << 10  # a quarter of one of these records
    assert read[0] <= runs * listing.RUN_READ_BYTES
    row = rows[0]
    assert (row.preset, row.started, row.last_iteration, row.train_iters) == ("big", "2026-11-30T00:00:00+00:00", 7, 9)
    assert "summary.json is damaged or larger than 64 KiB" in row.why
    assert "manifest.json is 1,000,000 bytes" in row.why and "its first 64 KiB were read" in row.why


def test_an_overlong_manifest_is_read_member_by_member_up_to_the_cut():
    from launcher import untrusted

    text = '{"preset": "toy", "created": "2026", "n": 1e5, "attempts": [{"started": "x"}, {"sta'
    assert untrusted.json_object_head(text, "m") == {"preset": "toy", "created": "2026", "n": 1e5}
    assert untrusted.json_object_head(text, "m", frozenset({"preset"})) == {"preset": "toy"}  # read no further
    # strict as every record: a NaN member ends what is taken, it is never a value
    assert untrusted.json_object_head('{"preset": "a", "x": NaN, "created": "b"', "m") == {"preset": "a"}
    assert untrusted.json_object_head('{"a": ' + "[" * 100 + "]" * 100 + ', "b": 1', "m") == {}
    with pytest.raises(Exception, match="not a JSON object"):
        untrusted.json_object_head("[1, 2", "m")


def test_an_attempt_that_ended_without_its_summary_is_not_read_from_an_earlier_summary(tmp_path):
    """A resumed attempt killed, or whose summary.json could not be written (a full disk), leaves running.json
    of a gone launcher beside the earlier attempt's summary: the run's state is that attempt's, not the old one."""
    run_dir = make_run(tmp_path, "345m-20261201T100000Z", "2026-12-01T10:00:00+00:00",
                       summary=summary("success", 1000, 1000, 1.0))
    os.utime(run_dir / "summary.json", ns=(1_000_000_000, 1_000_000_000))
    (run_dir / "running.json").write_text(json.dumps({"pid": finished_pid(), "host": socket.gethostname()}))
    row = describe(run_dir)
    assert row.state == "failed" and "summary.json is an earlier attempt's" in row.why
    assert row.last_iteration is None  # the earlier attempt's numbers are not this one's


def test_a_summary_written_after_running_json_is_the_runs_state(tmp_path):
    """running.json left behind (its removal failed) by an attempt that did write its summary."""
    run_dir = make_run(tmp_path, "345m-20261201T100000Z", "2026-12-01T10:00:00+00:00",
                       running={"pid": finished_pid(), "host": socket.gethostname()})
    os.utime(run_dir / "running.json", ns=(1_000_000_000, 1_000_000_000))
    (run_dir / "summary.json").write_text(json.dumps(summary("success", 1000, 1000, 1.0)))
    assert describe(run_dir).state == "succeeded"


def test_a_run_root_is_read_within_its_bound_and_the_newest_names_are_kept(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from launcher.errors import UserError
    from launcher.runs import listing

    root = tmp_path / "runs"
    root.mkdir()
    for number in range(30):
        (root / f"run-{number:03d}").mkdir()
    monkeypatch.setattr(listing, "MAX_RUNS", 5)
    kept = []
    monkeypatch.setattr(listing, "describe", lambda path: kept.append(path.name) or SimpleNamespace(started=None))
    monkeypatch.setattr(listing.os.path, "isfile", lambda path: True)  # each a run directory, without its records
    listing.list_runs(root)
    assert kept == [f"run-{number:03d}" for number in range(29, 24, -1)]  # newest names first
    monkeypatch.setattr(listing, "MAX_ROOT_ENTRIES", 10)
    with pytest.raises(UserError, match="more than 10 entries"):
        listing.list_runs(root)
