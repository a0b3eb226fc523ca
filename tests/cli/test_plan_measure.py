"""`launch plan PRESET --measure` on CPU: a stub torchrun prints Megatron-format log lines (the format of
tests/fixtures/logs), so the whole path runs: the launcher's own resolve, command and local backend, the log
read back, the ranking by measurement, the side-by-side table and the stored measurements."""

import json
import sys
from pathlib import Path

import pytest

from launcher.cli import plan_measure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"

# Step time falls with the micro batch, then rises (300/mbs + 20·mbs ms): micro batch 4 would be fastest.
STUB = '''#!{python}
import json, sys
argv = sys.argv
def flag(name, default):
    return int(argv[argv.index(name) + 1]) if name in argv else default
mbs, iters = flag("--micro-batch-size", 1), flag("--train-iters", 10)
with open({calls!r}, "a") as f:
    f.write(json.dumps(argv) + "\\n")
step_ms = 300 / mbs + 20 * mbs
for i in range(1, iters + 1):
    print(f" [2026-11-29 18:48:21.579751] iteration {{i:8d}}/{{iters:8d}} | consumed samples: {{i * 32:12d}} | "
          f"elapsed time per iteration (ms): {{step_ms * (5 if i == 1 else 1):.1f}} | learning rate: 1.0E-05 | "
          f"global batch size:    32 | lm loss: 1.1E+01 | loss scale: 1.0 | grad norm: 6.5 | "
          "number of skipped iterations:   0 | number of nan iterations:   0 |", flush=True)
    if i == 1:
        print(f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 600.0 | max allocated: {{1024.0 * mbs:.2f}} | "
              "reserved: 9000.0 | max reserved: 9000.0", flush=True)
'''


@pytest.fixture
def machine(tmp_path):
    """One visible GPU, a stub torchrun, an empty Megatron checkout, run root and data dir under tmp_path."""
    calls = tmp_path / "calls.jsonl"
    torchrun = tmp_path / "bin" / "torchrun"
    torchrun.parent.mkdir()
    torchrun.write_text(STUB.format(python=sys.executable, calls=str(calls)))
    torchrun.chmod(0o755)
    checkout = tmp_path / "megatron-lm"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("")
    env = {"CUDA_VISIBLE_DEVICES": "0", "MEGATRON_LAUNCH_DATA_DIR": str(tmp_path / "data")}
    flags = ["--no-doctor", "--megatron-path", str(checkout), "--set", f"torchrun={torchrun}",
             "--set", f"run_root={tmp_path / 'runs'}", "--set", "transformer_engine=false", "--set", "apex=false"]
    return env, flags, calls, tmp_path


def test_measure_ranks_by_the_measured_step_time_and_stores_it(launch, machine):
    env, flags, calls, tmp = machine
    code, out, err = launch("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "3",
                            "--format", "json", *flags, env=env)
    assert code == 0, err
    measured = json.loads(out)["measurements"]  # progress went to stderr
    assert "# measuring 1/3: TP1 PP1 DP1 MBS32 recompute=none (10 iterations)" in err
    # ranked by the stub's step times (the first 3 iterations are warm-up), not by the prediction
    assert [(m["trial"]["label"], m["step_s"], m["peak_gib"]) for m in measured] == [
        ("TP1 PP1 DP1 MBS16 recompute=none", pytest.approx(0.33875, abs=1e-4), 16.0),
        ("TP1 PP1 DP1 MBS32 recompute=none", pytest.approx(0.6494, abs=1e-4), 32.0),
        ("TP1 PP1 DP1 MBS32 recompute=none (no compiled ops)", pytest.approx(0.6494, abs=1e-4), 32.0),
    ]
    # each ran the command `launch` builds: torchrun … pretrain_gpt.py with the layout's settings
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [a[a.index("--micro-batch-size") + 1] for a in argvs] == ["32", "16", "32"]
    assert all(any(w.endswith("pretrain_gpt.py") for w in a) and a[a.index("--train-iters") + 1] == "10"
               for a in argvs)
    stored = json.loads((tmp / "data" / "measurements.json").read_text())
    assert [(r["label"], r["measured_s"] is not None, r["predicted_s"] > 0, r["gpu"]) for r in stored] == [
        ("TP1 PP1 DP1 MBS32 recompute=none", True, True, "h200-141gb"),
        ("TP1 PP1 DP1 MBS16 recompute=none", True, True, "h200-141gb"),
        ("TP1 PP1 DP1 MBS32 recompute=none (no compiled ops)", True, True, "h200-141gb"),
    ]
    # the measurement's final checkpoint is not kept
    assert not any((Path(m["run_dir"]) / "checkpoints").exists() for m in measured)


def test_measure_prints_measured_and_predicted_side_by_side(launch, machine):
    env, flags, _, tmp = machine
    code, out, err = launch("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "3",
                            *flags, env=env)
    assert code == 0, err
    assert "   # measured s/iter predicted   error peak GiB predicted GiB  layout" in out
    first = next(line for line in out.splitlines() if line.startswith("   1 "))
    assert first.split()[1] == "0.3388" and first.endswith("TP1 PP1 DP1 MBS16 recompute=none")
    assert "  #1: launch 345m --gpus-per-node 1 --set " in out and "--set micro_batch_size=16   (run " in out
    assert f"measurements stored in {tmp / 'data' / 'measurements.json'}" in out


def test_measure_without_a_gpu_says_plain_plan_needs_none(launch, machine):
    env, flags, _, _ = machine
    code, out, err = launch("plan", "345m", "--measure", *flags, env={**env, "CUDA_VISIBLE_DEVICES": ""})
    assert code == 2
    assert "error: no GPU is visible on this machine: --measure runs the layouts here" in err
    assert "hint: run it on a GPU machine (plain `launch plan` needs none)" in err


def test_measure_reads_step_time_and_peak_memory_from_a_real_h200_log():
    step, peak, count = plan_measure.read_log(FIXTURES / "h200_345m_1gpu.log")
    # iterations 1, 10, 20, …, 60; after the warm-up 356.9 (10, the interval's mean with compilation),
    # 186.2, 184.9, 187.0, 188.9 and 190.9 ms: the median of the six
    assert count == 7
    assert step == pytest.approx(0.18795)
    assert peak == pytest.approx(37210.09 / 1024)  # the largest "max allocated" of the memory reports


def test_one_layout_without_transformer_engine_is_measured_not_refused(launch, machine):
    env, flags, calls, _ = machine
    code, out, err = launch("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "1", *flags,
                            env=env)
    assert code == 0, err
    assert "no layout" not in err and len(calls.read_text().splitlines()) == 1


ZERO_MS = '''#!{python}
import sys
for i in range(1, 11):
    print(f" [2026-11-29 18:48:21.579751] iteration {{i:8d}}/      10 | consumed samples: {{i * 32:12d}} | "
          "elapsed time per iteration (ms): 0.0 | learning rate: 1.0E-05 | global batch size:    32 | "
          "lm loss: 1.1E+01 | loss scale: 1.0 | grad norm: 6.5 | number of skipped iterations:   0 | "
          "number of nan iterations:   0 |", flush=True)
'''


def test_a_run_logging_zero_ms_per_iteration_is_stored_and_printed(launch, machine):
    env, flags, _, tmp = machine
    torchrun = tmp / "bin" / "torchrun"
    torchrun.write_text(ZERO_MS.format(python=sys.executable))
    code, out, err = launch("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "2",
                            "--format", "json", *flags, env=env)
    assert "internal error" not in err and "Traceback" not in err
    assert code == 0, err
    assert len(json.loads(out)["measurements"]) == 2
    assert len(json.loads((tmp / "data" / "measurements.json").read_text())) == 2


@pytest.mark.parametrize("existing", ["[" * 100000 + "]" * 100000, '[{"x": NaN}]', "{}", "fifo"])
def test_an_unreadable_measurements_file_is_kept_and_the_new_runs_stored_beside_it(launch, machine, existing):
    import os
    env, flags, _, tmp = machine
    data = tmp / "data"
    data.mkdir()
    if existing == "fifo":
        os.mkfifo(data / "measurements.json")
    else:
        (data / "measurements.json").write_text(existing)
    code, out, err = launch("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "2",
                            *flags, env=env)
    assert code == 0, err
    assert "warning:" in err and "left as it is" in err
    if existing != "fifo":
        assert (data / "measurements.json").read_text() == existing
    (beside,) = [p for p in data.iterdir() if p.name.startswith("measurements-")]
    assert len(json.loads(beside.read_text())) == 2
