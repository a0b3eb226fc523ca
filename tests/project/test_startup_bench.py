"""scripts/bench_345m.py's start-up part, on CPU: the timed launches are a stand-in program that prints the lines
a launch prints (the launcher's run directory, Megatron's stamped milestones, an iteration line), so what
scripts/startup_timing.py reads from them and the breakdown table the bench prints are checked without a GPU."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_345m  # noqa: E402
import startup_timing  # noqa: E402

# Sleeps between the lines, so each milestone is later than the one before; Megatron stamps its program's start
# and its imports' end itself (before the lines that say so are printed), the others when they print.
FAKE_LAUNCH = textwrap.dedent('''
    import sys, time
    from datetime import datetime

    def stamp(name, at=None):
        when = datetime.fromtimestamp(at or time.time()).strftime("%Y-%m-%d %H:%M:%S.%f")
        print(f"[{name}] datetime: {when} ", flush=True)

    if "hang" in sys.argv:
        time.sleep(60)
    time.sleep(0.05)
    print("# run directory: /tmp/somewhere", flush=True); time.sleep(0.3)  # seen by the reader before the next stamp
    program_start = time.time(); time.sleep(0.1)
    imported = time.time(); time.sleep(0.1)
    print("using world size: 1, data-parallel size: 1", flush=True)
    stamp("before library-setup", program_start)
    stamp("after library-setup", imported)
    stamp("after megatron is initialized"); time.sleep(0.1)
    print(" [2026-12-04 10:00:00] iteration        1/       5 | consumed samples: 32 |", flush=True)
    time.sleep(0.1)
    stamp("after training is done")
    sys.exit(3 if "fail" in sys.argv else 0)
''')


@pytest.fixture
def fake_launch(tmp_path):
    script = tmp_path / "fake_launch.py"
    script.write_text(FAKE_LAUNCH)
    return [sys.executable, str(script)]


def test_the_milestones_of_a_launch_are_read_in_order(fake_launch, tmp_path):
    result = startup_timing.time_command(fake_launch, "fake", tmp_path / "out", timeout=30)
    marks = result["milestones_s"]
    columns = [marks[name] for _, name in startup_timing.BREAKDOWN]
    assert columns == sorted(columns) and columns[0] > 0
    assert marks["after library-setup"] - marks["before library-setup"] == pytest.approx(0.1, abs=0.08)
    assert result["exit_code"] == 0 and not result["killed_at_timeout"]
    assert json.loads((tmp_path / "out" / "fake.json").read_text()) == json.loads(json.dumps(result))


def test_the_breakdown_table_has_a_column_per_milestone_and_says_what_was_not_seen(fake_launch, tmp_path):
    done = startup_timing.time_command(fake_launch, "m345-warm1", tmp_path, timeout=30)
    failed = startup_timing.time_command([*fake_launch, "fail"], "toy-first", tmp_path, timeout=30)
    cut = startup_timing.time_command([*fake_launch, "hang"], "toy-warm1", tmp_path, timeout=1)
    header, *rows = startup_timing.breakdown_table([done, failed, cut]).splitlines()
    assert header.split()[1:] == ["run", "dir", "rank", "start", "library-setup", "megatron", "init", "iteration", "1",
                                  "training", "done", "exit"]
    cells = rows[0].split()
    assert cells[0] == "m345-warm1" and [float(c) for c in cells[1:]] == [
        done["milestones_s"][name] for _, name in startup_timing.BREAKDOWN]
    assert rows[1].endswith("(exit 3)")
    assert rows[2].split()[1:7] == ["-"] * 6 and rows[2].endswith("(killed at the time limit)")
    assert cut["killed_at_timeout"] and cut["milestones_s"]["exit"] < 10


def test_the_bench_times_each_startup_launch_after_one_that_fills_the_caches(fake_launch, tmp_path, monkeypatch,
                                                                            capsys):
    monkeypatch.setattr(bench_345m, "LAUNCH", fake_launch)
    monkeypatch.setattr(bench_345m, "gpu_ids", lambda: ["0"])
    assert bench_345m.main(["--parts", "startup", "--startup-repeats", "1", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "bench.json").read_text())["startup"]
    assert [r["label"] for r in runs] == ["m345-first", "toy-first", "m345-warm1", "toy-warm1"]
    assert runs[0]["command"] == "launch 345m --gpus-per-node 1 --set train_iters=5 --set log_interval=1"
    assert runs[1]["command"] == "launch toy --gpus-per-node 1"
    assert all((tmp_path / "startup" / f"{r['label']}.log").is_file() for r in runs)
    assert all(r["milestones_s"]["iteration 1 line"] < r["milestones_s"]["exit"] for r in runs)
    printed = capsys.readouterr().out
    assert "start-up, seconds from the command's start" in printed
    assert printed.count("\ntoy-warm1 ") == 1 and "iteration 1" in printed
