"""Where a run's wall time goes before its first iteration, and how long checkpoint saves block training.

The monitor stamps each line as it arrives (the launcher's own clock, from the moment it starts torchrun), so the
breakdown needs no timestamps in the log: start → Megatron initialised (imports, process group, compiled helpers)
→ training loop entered (model, optimizer, data) → first iteration line (first step, compilation). A save's
blocking time is Megatron's own `save-checkpoint` timer: the time the training loop spent inside save_checkpoint
(with an asynchronous save, only the part before the write goes to the background).
"""

from __future__ import annotations

import re
import time

_SAVE_TIMER_RE = re.compile(r"^\s*save-checkpoint \.+: \((?P<min>[\d.]+), (?P<max>[\d.]+)\)")
# the iteration names the save: an asynchronous save can still be writing when the next one begins
_SAVING_RE = re.compile(r"saving checkpoint at iteration\s+(?P<it>\d{1,18})(?!\d)")
_SAVED_RE = re.compile(r"successfully saved checkpoint from iteration\s+(?P<it>\d{1,18})(?!\d)")
INITIALIZED = "[after megatron is initialized]"
TRAINING = "[before the start of training step]"


class StartupClock:
    def __init__(self, now: float | None = None) -> None:
        self.start = time.monotonic() if now is None else now
        self.initialized: float | None = None
        self.training: float | None = None
        self.first_iteration: float | None = None
        self.save_blocking_s: list[float] = []
        self.saving: dict[int, float] = {}  # iteration → arrival of its "saving checkpoint" line
        self.save_wall_s: float | None = None  # from it to "successfully saved" (the write, even in background)

    def observe(self, text: str, is_iteration: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.initialized is None and INITIALIZED in text:
            self.initialized = now
        elif self.training is None and TRAINING in text:
            self.training = now
        elif is_iteration and self.first_iteration is None:
            self.first_iteration = now
        elif "save-checkpoint" in text and (m := _SAVE_TIMER_RE.match(text)):
            self.save_blocking_s.append(float(m["max"]) / 1000.0)
        elif m := _SAVING_RE.search(text):
            self.saving[int(m["it"])] = now
        elif (m := _SAVED_RE.search(text)) and int(m["it"]) in self.saving:
            self.save_wall_s = now - self.saving.pop(int(m["it"]))

    def as_dict(self) -> dict[str, float | None]:
        def span(a: float | None, b: float | None) -> float | None:
            return round(b - a, 2) if a is not None and b is not None else None

        return {
            "start_to_initialized_s": span(self.start, self.initialized),
            "model_optimizer_data_s": span(self.initialized, self.training),
            "first_iteration_s": span(self.training, self.first_iteration),
            "start_to_first_iteration_s": span(self.start, self.first_iteration),
            "last_save_blocking_s": round(self.save_blocking_s[-1], 2) if self.save_blocking_s else None,
            "last_save_written_s": round(self.save_wall_s, 2) if self.save_wall_s is not None else None,
        }


def render(startup: dict | None) -> list[str]:
    """Summary lines: the start-up breakdown and the blocking time of the last save."""
    if not startup:
        return []

    def s(key: str) -> str:
        value = startup.get(key)
        return "?" if value is None else f"{value:.1f} s"

    lines = []
    if startup.get("start_to_first_iteration_s") is not None:
        lines.append(f"start-up:           {s('start_to_first_iteration_s')} to iteration 1 = "
                     f"{s('start_to_initialized_s')} Megatron initialisation + {s('model_optimizer_data_s')} "
                     f"model, optimizer and data + {s('first_iteration_s')} first iteration")
    if startup.get("last_save_blocking_s") is not None:
        lines.append(f"checkpoint save:    blocked training {s('last_save_blocking_s')} (the last save; written "
                     f"{s('last_save_written_s')} after it began)")
    return lines
