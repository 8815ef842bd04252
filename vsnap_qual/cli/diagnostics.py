"""One line of ``vsnap-qual doctor``: a check's result, what it saw, and the fix. Shared by the doctor and the
runtimes, which bring their own checks (``Runtime.doctor``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """One doctor line."""

    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    fix: str = ""
    required: bool = True

    def line(self) -> str:
        tail = f" — fix: {self.fix}" if self.status == "FAIL" and self.fix else ""
        need = "" if self.required else " (optional)"
        return f"{self.status:4} {self.name}{need}: {self.detail}{tail}"
