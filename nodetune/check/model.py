"""Value types of `nodetune check`: one node's checks and their verdict (one check's outcome
is :mod:`nodetune.measure.result`'s, which `validate` shares)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nodetune.action import Action, highest
from nodetune.measure.result import (
    CheckResult,
    HelpLines,
    Status,
    failed,
    passed,
    skipped,
    unknown,
    warned,
)
from nodetune.verdicts import NodeState, NodeVerdict

if TYPE_CHECKING:  # the health check's every run imports this module: not validate's results
    from nodetune.errors import NodetuneError
    from nodetune.measure.sweep import SizeResult

__all__ = ["MAX_REASONS", "CheckResult", "HelpLines", "NodeChecks", "Status", "failed", "passed",
           "skipped", "unknown", "warned", "with_error"]

MAX_REASONS = 3  # failed checks named in a verdict's one-line reason
IMAGE_CHECKS = "container."  # --image's checks: the training image's faults, not the node's


@dataclass(frozen=True, slots=True)
class NodeChecks:
    """Every check of one node, or why the node could not be checked."""

    node: str
    results: tuple[CheckResult, ...] = ()
    error: str | None = None           # unreachable / probe failed: the reason
    error_exit_code: int | None = None  # the error's exit code (3 infrastructure, 4 timeout)
    error_blames_node: bool = True     # False: the error is the training image's (--image)
    duration_s: float = 0.0
    allreduce: tuple[SizeResult, ...] = ()  # the one-node all_reduce's sweep, when it ran
    # What the next check compares against: time, gpu.xid status, RDMA error counters.
    health: dict[str, Any] = field(default_factory=dict)
    # What the node runs (kernel, driver, VBIOS, torch, NCCL, firmware): check/versions.py
    versions: dict[str, str] = field(default_factory=dict)
    # Each HCA's firmware by RDMA device, which nodetune_expected_firmware holds it to
    hca_firmware: dict[str, str] = field(default_factory=dict)
    # The window the checks cover: the previous check's time, --sample's window
    window: dict[str, Any] = field(default_factory=dict)

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
    def unknowns(self) -> tuple[CheckResult, ...]:
        """The checks that could not be assessed (a tool hung, crashed or did not start)."""
        return tuple(r for r in self.results if r.status is Status.UNKNOWN)

    @property
    def action(self) -> Action:
        """What to do about the node: the highest action of its checks."""
        return highest(r.recommended for r in self.results)

    @property
    def warnings(self) -> tuple[CheckResult, ...]:
        """The checks that warn."""
        return tuple(r for r in self.results if r.status is Status.WARN)

    def get(self, name: str) -> CheckResult | None:
        """The first result called ``name`` (several checks may share a name, one per item)."""
        return next((r for r in self.results if r.name == name), None)

    def verdict(self) -> NodeVerdict:
        """bad on any failure, not assessed when nothing failed but a check could not be
        assessed, good when nothing failed, unreachable when not probed; each with the
        highest action of the node's checks."""
        if self.error is not None:
            return NodeVerdict(self.node, NodeState.UNREACHABLE, self.error)
        action = self.action
        if self.failures:
            reason = _listed("check(s) failed", self.failures)
            if self.unknowns:
                reason += f"; {len(self.unknowns)} not assessed"
            return NodeVerdict(self.node, NodeState.BAD, reason, busbw_gbps=self.busbw_gbps,
                               details={"failed_checks": [r.name for r in self.failures]},
                               action=action)
        if self.unknowns:
            return NodeVerdict(self.node, NodeState.NOT_ASSESSED,
                               _listed("check(s) not assessed", self.unknowns),
                               busbw_gbps=self.busbw_gbps, action=action,
                               details={"unknown_checks": [r.name for r in self.unknowns]})
        warn = ", ".join(r.name for r in self.warnings)
        return NodeVerdict(self.node, NodeState.GOOD,
                           f"all checks passed (warnings: {warn})" if warn
                           else "all checks passed", busbw_gbps=self.busbw_gbps,
                           action=action)

    def own(self) -> NodeChecks:
        """These checks without the training image's (``container.*``, and an error the
        image caused): what Slurm judges the node itself by."""
        keep = tuple(r for r in self.results if not r.name.startswith(IMAGE_CHECKS))
        if self.error is not None and self.error_blames_node:
            return replace(self, results=keep)
        return replace(self, results=keep, error=None, error_exit_code=None)

    def image_fault(self) -> str | None:
        """Why Slurm leaves the node alone: every fault of this run is the image's (None: the
        node has faults of its own, or the image none)."""
        theirs = [f"{r.name} ({r.measured or '?'}, expected {r.expected or '?'})"
                  for r in self.failures if r.name.startswith(IMAGE_CHECKS)]
        if self.error is not None and not self.error_blames_node:
            theirs.append(self.error)
        if not theirs or self.own().verdict().state is not NodeState.GOOD:
            return None
        return ("not drained: its failures are the training image's, not the node's: "
                + "; ".join(theirs))

    def to_list(self) -> list[dict[str, Any]]:
        """``report.json``'s ``checks[NODE]``: failures first, then by name."""
        return [r.to_dict() for r in sorted(self.results, key=lambda r: r.status.order)]


def _listed(what: str, results: tuple[CheckResult, ...]) -> str:
    """``N what: name (measured, expected ...); ...`` naming at most MAX_REASONS; an unknown
    check is named with why it could not be assessed."""
    shown = [f"{r.name} ({r.message})" if r.status is Status.UNKNOWN else
             f"{r.name} ({r.measured or '?'}, expected {r.expected or '?'})"
             for r in results[:MAX_REASONS]]
    more = len(results) - MAX_REASONS
    return (f"{len(results)} {what}: " + "; ".join(shown)
            + (f"; and {more} more" if more > 0 else ""))


def with_error(checks: NodeChecks, exc: NodetuneError) -> NodeChecks:
    """``checks`` ended by ``exc``: its message, its exit code and whom it blames
    (:func:`nodetune.remote.executor.blame`), the checks already made kept."""
    return replace(checks, error=exc.message, error_exit_code=int(exc.exit_code),
                   error_blames_node=exc.blames_node)
