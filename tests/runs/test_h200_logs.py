"""Logs recorded on H200s through `launch` (tests/fixtures/logs/h200_*.log) read back by the run-log parser."""

from __future__ import annotations

from launcher.runs import logparse as lp
from launcher.runs.verdict import RunLog


def summarize(lines, tmp_path, *, tracker: int | None, exit_code: int):
    log = RunLog(seq_length=1024)
    log.start_attempt()
    for event in lp.parse_lines(lines):
        log.feed(event)
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    if tracker is not None:
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(f"{tracker}\n")
    return log.summary(checkpoint_dir=checkpoints, exit_code=exit_code)


def iteration_lines(lines):
    return [e for e in lp.parse_lines(lines) if isinstance(e, lp.IterationLine)]


def test_sigterm_that_saved_is_a_stop_not_a_failure(log_fixture, tmp_path):
    """torchrun, given the SIGTERM too, exits 1 with a SignalException after Megatron saved and exited."""
    lines = log_fixture("h200_345m_sigterm.log")
    assert any("SignalException" in line for line in lines)
    saved = [e.iteration for e in lp.parse_lines(lines) if isinstance(e, lp.CheckpointSaved)]
    summary = summarize(lines, tmp_path, tracker=saved[-1], exit_code=1)
    assert summary.outcome == "stopped", summary.reasons
    assert summary.checkpoints_saved == saved


def test_sigterm_without_a_saved_checkpoint_still_fails(log_fixture, tmp_path):
    lines = [line for line in log_fixture("h200_345m_sigterm.log") if "successfully saved checkpoint" not in line]
    summary = summarize(lines, tmp_path, tracker=None, exit_code=1)
    assert summary.outcome == "failed"


def test_resumed_run_continues_from_the_saved_iteration(log_fixture):
    first, second = log_fixture("h200_345m_sigterm.log"), log_fixture("h200_345m_resumed.log")
    saved = [e.iteration for e in lp.parse_lines(first) if isinstance(e, lp.CheckpointSaved)][-1]
    loaded = [e for e in lp.parse_lines(second) if isinstance(e, lp.CheckpointLoaded)]
    assert [e.iteration for e in loaded] == [saved]
    before, after = iteration_lines(first), iteration_lines(second)
    assert after[0].iteration == saved + 1
    assert after[0].lm_loss < before[-1].lm_loss + 0.5  # continuous: no restart from the initial loss
    assert after[-1].lm_loss < before[0].lm_loss - 1.0


def test_345m_preset_log_reports_sdpa_throughput(log_fixture, tmp_path):
    lines = log_fixture("h200_345m_1gpu.log")
    assert any("megatron-launch fast ops:" in line for line in lines)
    summary = summarize(lines, tmp_path, tracker=60, exit_code=0)
    assert summary.outcome == "success"
    lines_ = iteration_lines(lines)
    assert lines_[-1].lm_loss < lines_[0].lm_loss
    gbs = lines_[-1].global_batch_size
    assert summary.steady_tokens_per_s == gbs * 1024 / (summary.steady_ms_per_iter / 1000.0)


def test_compiled_layer_runs_train_on_one_and_two_gpus(log_fixture, tmp_path):
    """The final benchmark's runs (docs/benchmarks.md): compiled layers, 1 GPU and data parallel 2."""
    summaries = {}
    for name in ("h200_345m_1gpu_compiled.log", "h200_345m_dp2_compiled.log"):
        lines = log_fixture(name)
        (tmp_path / name).mkdir()
        assert any("megatron-launch fast ops:" in line and line.rstrip().endswith(",layer") for line in lines)
        summary = summaries[name] = summarize(lines, tmp_path / name, tracker=60, exit_code=0)
        assert summary.outcome == "success" and summary.last_iteration == 60
        losses = [line.lm_loss for line in iteration_lines(lines)]
        assert losses[-1] < losses[0] - 1.0
    one, two = summaries["h200_345m_1gpu_compiled.log"], summaries["h200_345m_dp2_compiled.log"]
    assert 0.9 < two.steady_tokens_per_s / (2 * one.steady_tokens_per_s) <= 1.0  # DP 2 scaling efficiency


def test_175b_shrunk_run_logs_every_iteration(log_fixture, tmp_path):
    lines = log_fixture("h200_175b_shrunk_tp2_every_iteration.log")
    assert [line.iteration for line in iteration_lines(lines)] == [1, 2, 3]
    assert summarize(lines, tmp_path, tracker=3, exit_code=0).outcome == "success"


def test_a_run_whose_every_step_was_skipped_is_not_a_success(tmp_path):
    # seen on an H200: two fp16 runs skipped all 4 steps (loss scale 2^32 → 2^28) and ended "outcome: success"
    lines = [f"[2026-11-29 17:10:4{i}] iteration        {i}/       4 | consumed samples:           {8 * i} | "
             "elapsed time per iteration (ms): 900.1 | global batch size:     8 | "
             f"loss scale: {2.0 ** (32 - i)} | number of skipped iterations:   1 | number of nan iterations:   0 |"
             for i in range(1, 5)]
    lines.append("[after training is done] datetime: 2026-11-29 17:10:50")
    summary = summarize(lines, tmp_path, tracker=None, exit_code=0)
    assert summary.outcome == "failed", summary
    assert any(r.startswith("no step updated the weights:") for r in summary.reasons), summary.reasons
