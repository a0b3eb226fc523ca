"""Parsing Megatron log lines (formats of 432d76b2b8bf, reference §4)."""

import math

import pytest

from launcher.runs import logparse as lp


def events(lines, kind):
    return [e for e in lp.parse_lines(lines) if isinstance(e, kind)]


def test_full_iteration_line_with_every_common_field():
    line = (" [2026-05-26 14:02:11.532114] iteration      100/    1000 | consumed samples:         6400 |"
            " elapsed time per iteration (ms): 212.4 | throughput per GPU (TFLOP/s/GPU): 87.6 |"
            " learning rate: 1.496000E-04 | global batch size:    64 | lm loss: 6.123456E+00 | loss scale: 1.0 |"
            " grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    it = lp.parse_line(line)
    assert isinstance(it, lp.IterationLine)
    assert (it.iteration, it.train_iters, it.consumed_samples) == (100, 1000, 6400)
    assert it.elapsed_ms == 212.4 and it.tflops_per_gpu == 87.6
    assert it.learning_rate == pytest.approx(1.496e-4)
    assert it.global_batch_size == 64 and it.lm_loss == pytest.approx(6.123456)
    assert it.loss_scale == 1.0 and it.grad_norm == 1.234
    assert (it.skipped_iterations, it.nan_iterations) == (0, 0)
    assert it.timestamp.year == 2026 and it.timestamp.microsecond == 532114
    assert it.complete


def test_optional_fields_energy_zeros_params_norm_skipped_samples_and_extra_losses():
    line = (" [2026-05-26 14:02:11.532114] iteration        7/      10 | consumed samples:           56 |"
            " skipped samples:            8 | elapsed time per iteration (ms): 50.0 |"
            " energy per GPU (J/iter/GPU): 12.5 | power per GPU (W/GPU): 250.0 | global batch size:     8 |"
            " lm loss: 4.000000E+00 | load_balancing_loss: 1.100000E-01 | loss scale: 65536.0 |"
            " num zeros: 123.0 | params norm: 201.456 | number of skipped iterations:   1 |"
            " number of nan iterations:   0 |")
    it = lp.parse_line(line)
    assert it.skipped_samples == 8 and it.energy_j_per_gpu == 12.5 and it.power_w_per_gpu == 250.0
    assert it.learning_rate is None and it.grad_norm is None and it.tflops_per_gpu is None
    assert it.losses == {"lm loss": 4.0, "load_balancing_loss": pytest.approx(0.11)}
    assert it.num_zeros == 123.0 and it.params_norm == 201.456 and it.skipped_iterations == 1


def test_first_iteration_of_the_toy_run(log_fixture):
    lines = events(log_fixture("toy_fp32_1gpu.log"), lp.IterationLine)
    assert [line.iteration for line in lines] == [1, *range(10, 101, 10)]
    first = lines[0]
    assert first.train_iters == 100 and first.elapsed_ms == 18912.4  # start-up included
    assert first.lm_loss == pytest.approx(4.8312)
    assert lines[-1].lm_loss == pytest.approx(4.312)
    assert all(line.complete for line in lines)


def test_fp16_loss_scale_skips(log_fixture):
    lines = events(log_fixture("fp16_8gpu_loss_scale_skips.log"), lp.IterationLine)
    first = lines[0]
    # The skipped first step has no loss accumulated, no grad norm and no learning-rate step yet.
    assert first.lm_loss is None and first.grad_norm is None and first.learning_rate is None
    assert first.loss_scale == 2.0 ** 32 and first.skipped_iterations == 1
    scales = [line.loss_scale for line in lines]
    assert scales == sorted(scales, reverse=True) and scales[-1] < scales[0]
    assert [line.skipped_iterations for line in lines] == [1, 4, 4, 0, 0, 1, 0]


def test_nan_iterations_drop_the_loss_and_show_nan_grad_norm(log_fixture):
    lines = events(log_fixture("bf16_2gpu_nan.log"), lp.IterationLine)
    last = lines[-1]
    assert last.lm_loss is None and math.isnan(last.grad_norm)
    assert last.nan_iterations == 3
    failures = events(log_fixture("bf16_2gpu_nan.log"), lp.ResultValidationFailure)
    assert failures[0].iteration == 37 and "NaN" in failures[0].message
    assert events(log_fixture("bf16_2gpu_nan.log"), lp.ExitLine) == [lp.ExitLine("interval", "iteration 41")]


def test_memory_and_theoretical_memory_lines(log_fixture):
    lines = log_fixture("fp16_8gpu_loss_scale_skips.log")
    memory = events(lines, lp.MemoryReport)
    assert [(m.rank, m.after_iterations) for m in memory] == [(0, 1), (0, 5)]
    assert memory[1].max_allocated_mb == 6402.17 and memory[1].reserved_mb == 7322.0
    (theory,) = events(lines, lp.TheoreticalMemory)
    assert theory == lp.TheoreticalMemory(3891.51, 11210.75, 15102.26)
    used = lp.parse_line("[Rank 3] (after 2 iterations) memory (MB) | allocated: 1.00 | max allocated: 2.00"
                         " | reserved: 3.00 | max reserved: 4.00 | total device memory used: 5.00")
    assert used.rank == 3 and used.device_used_mb == 5.0


def test_checkpoint_validation_and_milestones(log_fixture):
    lines = log_fixture("toy_fp32_1gpu.log")
    assert events(lines, lp.CheckpointSaving)[0].ckpt_format == "torch_dist"
    (saved,) = events(lines, lp.CheckpointSaved)
    assert saved.iteration == 100 and saved.directory.endswith("/checkpoints")
    assert events(lines, lp.CheckpointMissing)[0].tracker_file.endswith("latest_checkpointed_iteration.txt")
    validation = events(lines, lp.Validation)
    assert [(v.iteration, v.split, v.final) for v in validation] == [
        (50, "validation", False), (100, "validation", True), (100, "test", True)]
    assert validation[0].perplexities["lm loss"] == pytest.approx(math.exp(validation[0].values["lm loss"]),
                                                                   rel=1e-5)
    assert "after training is done" in [m.name for m in events(lines, lp.Milestone)]


def test_resume_and_signal_exit(log_fixture):
    lines = log_fixture("toy_resume_sigterm.log")
    assert events(lines, lp.CheckpointLoaded) == [
        lp.CheckpointLoaded("/runs/toy-20261129T160150Z/checkpoints", 50)]
    assert events(lines, lp.IterationLine)[0].iteration == 51
    assert events(lines, lp.ExitLine) == [lp.ExitLine("signal", "SIGTERM")]


def test_argument_dump_survives_rank_prefixes(log_fixture):
    for name in ("toy_fp32_1gpu.log", "fp16_8gpu_loss_scale_skips.log", "bf16_2gpu_nan.log"):
        arguments = {a.name: a.value for a in events(log_fixture(name), lp.Argument)}
        assert lp.argument_value(arguments["seq_length"]) in (64, 1024)
        assert isinstance(lp.argument_value(arguments["train_iters"]), int)


@pytest.mark.parametrize("prefix", ["", "[rank3]:", "[default0]:", "3: ", " 12: ", "0: [rank0]:"])
def test_launcher_prefixes_and_colour_codes(prefix):
    body = (" [2026-05-26 14:02:11.532114] iteration        1/      10 | consumed samples:            8 |"
            " elapsed time per iteration (ms): 9.0 | global batch size:     8 | lm loss: 4.600000E+00 |"
            " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    it = lp.parse_line(f"\x1b[32m{prefix}{body}\x1b[0m\r\n")
    assert it.iteration == 1 and it.lm_loss == 4.6 and it.complete
    assert lp.clean_line(prefix + "  seq_length .... 1024") == "  seq_length .... 1024"


def test_truncated_iteration_line_keeps_only_closed_fields(log_fixture):
    last = events(log_fixture("toy_truncated.log"), lp.IterationLine)[-1]
    assert last.iteration == 40 and not last.complete
    assert last.global_batch_size == 8 and last.lm_loss is None  # "lm loss: 4.4" was cut: not trusted


def test_garbage_yields_nothing(log_fixture):
    assert list(lp.parse_lines(log_fixture("garbled.log"))) == []
    assert lp.parse_line("iteration | | : : |||") is None
    assert lp.parse_line(" validation loss at iteration 5 | ") is None


def test_upstream_simple_loop_lines():
    from launcher.runs.verdict import RunLog

    lines = []
    for i, loss in enumerate([4.6155, 4.6151, 4.6149, 4.6150, 4.6146]):
        for rank in (0, 1):  # every rank prints
            lines.append(f"[rank{rank}]:Iteration {i}: Losses reduced: [{{'lm loss': tensor({loss}, "
                         f"device='cuda:{rank}')}}]")
    lines.append("[rank0]:Successfully loaded the model")
    runlog = RunLog()
    for event in lp.parse_lines(lines):
        runlog.feed(event)
    summary = runlog.summary(exit_code=0)
    # the lines kept for the plots: all of them, below verdict.PLOT_POINTS
    assert runlog.line_count == 5 and [point.iteration for point in runlog.points.items()] == [1, 2, 3, 4, 5]
    assert summary.final_loss == pytest.approx(4.6146) and summary.outcome == "success"
