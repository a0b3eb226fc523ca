"""One check's answer: ok / warn / fail, what was found, and how to fix it (`launch doctor` and the checks before
a launch print these)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str = ""

    def render(self) -> str:
        text = f"{self.status:4}  {self.check}: {self.detail}"
        if self.fix and self.status != "ok":
            text += f"\n      fix: {self.fix}"
        return text
