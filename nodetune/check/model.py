"""Value types of `nodetune check`: one check's outcome, one node's checks, their verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nodetune.validate.result import SizeResult
from nodetune.verdicts import NodeState, NodeVerdict

MAX_REASONS = 3  # failed checks named in a verdict's one-line reason


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


@dataclass(frozen=True, slots=True)
class NodeChecks:
    """Every check of one node, or why the node could not be checked."""

    node: str
    results: tuple[CheckResult, ...] = ()
    error: str | None = None           # unreachable / probe failed: the reason
    error_exit_code: int | None = None  # the error's exit code (3 infrastructure, 4 timeout)
    duration_s: float = 0.0
    allreduce: tuple[SizeResult, ...] = ()  # the one-node all_reduce's sweep, when it ran
    # What the next check compares against: time, gpu.xid status, RDMA error counters.
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def busbw_gbps(self) -> float | None:
        """busbw at the largest size of the one-node all_reduce."""
        return max(self.allreduce, key=lambda s: s.bytes).busbw if self.allreduce else None

    @property
    def reachable(self) -> bool:
        """Whether the node was probed at all."""
        return self.error is None

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The failing checks."""
        return tuple(r for r in self.results if r.status is Status.FAIL)

    @property
    def warnings(self) -> tuple[CheckResult, ...]:
        """The checks that warn."""
        return tuple(r for r in self.results if r.status is Status.WARN)

    def get(self, name: str) -> CheckResult | None:
        """The first result called ``name`` (several checks may share a name, one per item)."""
        return next((r for r in self.results if r.name == name), None)

    def verdict(self) -> NodeVerdict:
        """good when nothing failed, bad on any failure, unreachable when not probed."""
        if self.error is not None:
            return NodeVerdict(self.node, NodeState.UNREACHABLE, self.error)
        if self.failures:
            shown = [f"{r.name} ({r.measured or '?'}, expected {r.expected or '?'})"
                     for r in self.failures[:MAX_REASONS]]
            more = len(self.failures) - MAX_REASONS
            reason = (f"{len(self.failures)} check(s) failed: " + "; ".join(shown)
                      + (f"; and {more} more" if more > 0 else ""))
            return NodeVerdict(self.node, NodeState.BAD, reason, busbw_gbps=self.busbw_gbps,
                               details={"failed_checks": [r.name for r in self.failures]})
        warn = ", ".join(r.name for r in self.warnings)
        return NodeVerdict(self.node, NodeState.GOOD,
                           f"all checks passed (warnings: {warn})" if warn
                           else "all checks passed", busbw_gbps=self.busbw_gbps)

    def to_list(self) -> list[dict[str, Any]]:
        """``report.json``'s ``checks[NODE]``: failures first, then by name."""
        return [r.to_dict() for r in sorted(self.results, key=lambda r: r.status.order)]
