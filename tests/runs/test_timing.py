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


def test_a_save_still_writing_when_the_next_begins_is_timed_from_its_own_start():
    clock = StartupClock(now=0.0)
    lines = [
        (10.0, "[2026-12-03 13:50:25.023204] saving checkpoint at iteration      15 to /c in torch_dist format"),
        (10.5, "    save-checkpoint ................................: (500.00, 510.00)"),
        (12.0, "[2026-12-03 13:50:27.023204] saving checkpoint at iteration      30 to /c in torch_dist format"),
        (12.4, "    save-checkpoint ................................: (400.00, 420.00)"),
        (19.0, "  [2026-12-03 13:50:34.39] successfully saved checkpoint from iteration      15 to /c [ t 1/1 ]"),
        (26.0, "  [2026-12-03 13:50:41.39] successfully saved checkpoint from iteration      30 to /c [ t 1/1 ]"),
    ]
    for now, text in lines:
        clock.observe(text, False, now=now)
        if "iteration      15 to /c [" in text:
            assert clock.as_dict()["last_save_written_s"] == 9.0  # not 7.0, from the later save's start
    assert clock.as_dict()["last_save_blocking_s"] == 0.42 and clock.as_dict()["last_save_written_s"] == 14.0
