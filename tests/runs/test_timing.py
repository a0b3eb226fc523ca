"""The run summary's start-up breakdown and save blocking time, from lines stamped as they arrive."""

from launcher.runs.timing import StartupClock, render


def test_breakdown_from_arrival_times_and_megatron_save_timer():
    clock = StartupClock(now=100.0)
    lines = [
        (101.0, "> initializing torch distributed ...", False),
        (113.4, "[after megatron is initialized] datetime: 2026-12-01 10:00:13 ", False),
        (124.7, "[before the start of training step] datetime: 2026-12-01 10:00:24 ", False),
        (131.1, " [2026-12-01 10:00:31] iteration        1/      60 | ...", True),
        (133.0, " [2026-12-01 10:00:33] iteration        2/      60 | ...", True),
        (139.0, "saving checkpoint at iteration      60 to /runs/x/checkpoints in torch_dist format", False),
        (140.0, "    save-checkpoint ................................: (20950.10, 21003.52)", False),
        (141.5, "  successfully saved checkpoint from iteration      60 to /runs/x/checkpoints [ t 1/1, p 1/1 ]",
         False),
    ]
    for now, text, is_iteration in lines:
        clock.observe(text, is_iteration, now=now)
    assert clock.as_dict() == {"start_to_initialized_s": 13.4, "model_optimizer_data_s": 11.3,
                               "first_iteration_s": 6.4, "start_to_first_iteration_s": 31.1,
                               "last_save_blocking_s": 21.0, "last_save_written_s": 2.5}
    text = "\n".join(render(clock.as_dict()))
    assert "start-up:           31.1 s to iteration 1 = 13.4 s Megatron initialisation" in text
    assert "checkpoint save:    blocked training 21.0 s" in text


def test_nothing_known_renders_nothing():
    assert render(None) == []
    assert render(StartupClock(now=0.0).as_dict()) == []
