"""One named check's outcome on one node, shared by `check` and `validate`
(``validate --rdma-bw``, ``validate --image``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nodetune.action import Action, for_check

# Lines of a list in a verb's --help (a check module's ``HELP``, an inventory reader's
# ``VARS_HELP``): each entry the name as listed there (a check's with its [D/P]-style
# suffix), then its text, one item per line.
HelpLines = tuple[tuple[str, ...], ...]


class Status(Enum):
    """A check's outcome."""

    PASS = "pass"  # noqa: S105 - a status, not a password
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    # Could not be assessed: the tool that reads it hung, crashed or could not start.
    # Never a pass: the node's verdict is "not assessed" (exit 5).
    UNKNOWN = "unknown"

    @property
    def order(self) -> int:
        """Sort key: failures first, then what could not be assessed."""
        return {"fail": 0, "unknown": 1, "warn": 2, "pass": 3, "skip": 4}[self.value]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One named check on one node: what was measured, what was expected, and why."""

    name: str        # dotted: gpu.count, fabric.mtu, software.shm ...
    status: Status
    measured: str = ""
    expected: str = ""
    source: str = ""   # inventory variable, role default, or a public source
    message: str = ""  # plain words: what is wrong, or why it was skipped
    action: Action | None = None  # what to do about it; None: the check's default

    @property
    def recommended(self) -> Action:
        """What to do about this result (:mod:`nodetune.action`): the one the check
        set, else its default for a failure or an unknown; none for the rest."""
        if self.action is not None:
            return self.action
        if self.status in (Status.FAIL, Status.UNKNOWN):
            return for_check(self.name, failed=self.status is Status.FAIL)
        return Action.NONE

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form, as ``report.json``'s ``checks[NODE][i]``."""
        return {"name": self.name, "status": self.status.value, "measured": self.measured,
                "expected": self.expected, "source": self.source, "message": self.message,
                "action": self.recommended.value}


def passed(name: str, measured: str, expected: str, source: str, message: str = "") -> (
        CheckResult):
    """A passing check."""
    return CheckResult(name, Status.PASS, measured, expected, source, message)


def failed(name: str, measured: str, expected: str, source: str, message: str, *,
           action: Action | None = None) -> CheckResult:
    """A failing check; ``message`` says what is wrong in plain words, ``action`` what to do
    (None: the check's default, :func:`nodetune.action.for_check`)."""
    return CheckResult(name, Status.FAIL, measured, expected, source, message, action)


def warned(name: str, measured: str, expected: str, source: str, message: str) -> CheckResult:
    """A check that found something to look at that does not make the node bad."""
    return CheckResult(name, Status.WARN, measured, expected, source, message)


def skipped(name: str, reason: str, *, expected: str = "", source: str = "") -> CheckResult:
    """A check that could not apply here, with the reason."""
    return CheckResult(name, Status.SKIP, "", expected, source, reason)


def unknown(name: str, reason: str, *, expected: str = "", source: str = "") -> CheckResult:
    """A check that could not be assessed (its tool hung, crashed or could not start),
    with the reason: never a pass."""
    return CheckResult(name, Status.UNKNOWN, "", expected, source, reason)
