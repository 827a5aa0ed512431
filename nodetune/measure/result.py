"""One named check's outcome on one node, shared by `check` and `validate`
(``validate --rdma-bw``, ``validate --image``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(Enum):
    """A check's outcome."""

    PASS = "pass"  # noqa: S105 - a status, not a password
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def order(self) -> int:
        """Sort key: failures first."""
        return {"fail": 0, "warn": 1, "pass": 2, "skip": 3}[self.value]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One named check on one node: what was measured, what was expected, and why."""

    name: str        # dotted: gpu.count, fabric.mtu, software.shm ...
    status: Status
    measured: str = ""
    expected: str = ""
    source: str = ""   # inventory variable, role default, or a public source
    message: str = ""  # plain words: what is wrong, or why it was skipped

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form, as ``report.json``'s ``checks[NODE][i]``."""
        return {"name": self.name, "status": self.status.value, "measured": self.measured,
                "expected": self.expected, "source": self.source, "message": self.message}


def passed(name: str, measured: str, expected: str, source: str, message: str = "") -> (
        CheckResult):
    """A passing check."""
    return CheckResult(name, Status.PASS, measured, expected, source, message)


def failed(name: str, measured: str, expected: str, source: str, message: str) -> CheckResult:
    """A failing check; ``message`` says what is wrong in plain words."""
    return CheckResult(name, Status.FAIL, measured, expected, source, message)


def warned(name: str, measured: str, expected: str, source: str, message: str) -> CheckResult:
    """A check that found something to look at that does not make the node bad."""
    return CheckResult(name, Status.WARN, measured, expected, source, message)


def skipped(name: str, reason: str, *, expected: str = "", source: str = "") -> CheckResult:
    """A check that could not apply here, with the reason."""
    return CheckResult(name, Status.SKIP, "", expected, source, reason)
