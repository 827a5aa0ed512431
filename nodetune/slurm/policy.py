"""One drain policy for every nodetune writer: who wrote a node's reason, which states are
Slurm's for now, what a verdict may do, and how strict a pass must be to lift a drain.

Two writers drain nodes, each with its own reason form:

- the controller (``nodetune check|validate --drain``): ``nodetune <verb> <run id>: <why>``
  (:data:`~nodetune.slurm.model.OWNED_REASON`), proven by the run record it names;
- the node-local health check (slurmd's HealthCheckProgram, a Prolog):
  ``nodetune healthcheck: <why>`` (:data:`HEALTHCHECK_PREFIX`), proven by the reason it
  recorded on the node when it drained.

``apply --reboot`` through Slurm writes ``nodetune reboot: <why>`` (:data:`REBOOT_PREFIX`;
Slurm holds such a node's state until it is back). ``nodetune: <why>`` is what they all
wrote before: it is some nodetune writer's, never proven to be the reader's.

Both sides decide with :func:`ruling`: a bad verdict drains a node in service, or renews
the writer's own drain; a good verdict resumes the writer's own drain; anyone else's drain
(the other writer's, a person's, Slurm's) stays unless the controller's operator names it
(``--resume-reason``). A node whose state Slurm holds for now (a reboot, power saving,
maintenance, a future node) is neither drained nor resumed by anyone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from nodetune.slurm.model import OWNED_REASON
from nodetune.slurm.state import SlurmNode

HEALTHCHECK_PREFIX = "nodetune healthcheck: "
REBOOT_PREFIX = "nodetune reboot: "  # apply --reboot through Slurm (playbooks/reboot.yml)
LEGACY_PREFIX = "nodetune: "  # every writer before it had its own form
# State flags (lower case) of a node whose state Slurm, a reboot or power saving holds for
# now: nothing is drained over them or resumed from them. sinfo --json writes a flag as
# Slurm's node_state_flags[] table names it (src/common/slurm_protocol_defs.c, read
# 2026-11-29): MAINTENANCE, REBOOT_REQUESTED, REBOOT_ISSUED, POWER_DOWN, POWERED_DOWN,
# POWERING_DOWN, POWER_UP, POWERING_UP; sinfo's text writes "maint"; FUTURE is a base
# state.
SLURM_HELD = frozenset({"maint", "maintenance", "reboot_requested", "reboot_issued",
                        "power_down", "powered_down", "powering_down", "power_up",
                        "powering_up", "future"})


class Whose(Enum):
    """Whose a node's state is, from one writer's side."""

    NONE = "none"          # in service: no drain to own
    SELF = "this writer"   # this writer's own drain, proven
    OTHER = "another nodetune writer"
    PERSON = "a person"    # any other reason: an admin's, Slurm's own ("Not responding")


class Act(Enum):
    """What a verdict does to a node."""

    DRAIN = "drain"
    RESUME = "resume"
    LEAVE = "leave"        # out of service for someone else, or held by Slurm: untouched
    NOTHING = "nothing"    # in service and good: nothing to do


def writer_of(reason: str) -> str | None:
    """The nodetune writer a reason's form names (unproven: anyone can type it):
    ``controller``, ``healthcheck``, ``reboot``, ``nodetune`` (the old shared form), or
    None."""
    if OWNED_REASON.match(reason):
        return "controller"
    if reason.startswith(HEALTHCHECK_PREFIX):
        return "healthcheck"
    if reason.startswith(REBOOT_PREFIX):
        return "reboot"
    if reason.startswith(LEGACY_PREFIX):
        return "nodetune"
    return None


def held_by_slurm(node: SlurmNode) -> str | None:
    """The flag by which Slurm holds ``node``'s state for now (None: it holds none)."""
    held = sorted(node.flags & SLURM_HELD)
    return held[0] if held else None


def ruling(node: SlurmNode, owner: Whose, *, healthy: bool, named: bool = False) -> Act:
    """What a verdict may do to ``node``, the same for both writers.

    ``owner``: whose the node's drain is from the writer's side (:class:`Whose`);
    ``named``: the operator named this drain's reason for resuming (the controller's
    ``--resume-reason``; the health check never has one). A resume this allows is still
    subject to the writer's own checks (the controller's: the drain came before the run,
    and the pass is as strict as the one that drained).
    """
    if held_by_slurm(node):
        return Act.LEAVE
    if not node.out_of_service:
        return Act.NOTHING if healthy else Act.DRAIN
    if owner is Whose.SELF:
        return Act.RESUME if healthy else Act.DRAIN
    if healthy and named:
        return Act.RESUME
    return Act.LEAVE


# --- pass marks -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassMark:
    """What a validate run judged a node by: a bandwidth mark (None: bandwidth not judged),
    where it was judged, the test, the transport it expected and whether it ran ib_write_bw.

    A drain records the mark of the run that drained; a resume needs a pass whose mark
    :meth:`covers` it.
    """

    busbw_gbps: float | None
    at_bytes: int | None          # the largest size measured, where busbw is judged
    collective: str = "all_reduce"
    backend: str = "nccl"
    algorithm: str | None = None  # NCCL_ALGO when the run forced one (Ring), else None
    expect_transport: str = "any"
    rdma_bw: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as a drain action's ``pass_mark``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: object) -> PassMark | None:
        """A recorded mark (None: not a mark)."""
        if not isinstance(doc, Mapping):
            return None
        try:
            busbw, at = doc.get("busbw_gbps"), doc.get("at_bytes")
            return cls(busbw_gbps=None if busbw is None else float(busbw),
                       at_bytes=None if at is None else int(at),
                       collective=str(doc.get("collective", "all_reduce")),
                       backend=str(doc.get("backend", "nccl")),
                       algorithm=None if doc.get("algorithm") is None else str(doc["algorithm"]),
                       expect_transport=str(doc.get("expect_transport", "any")),
                       rdma_bw=bool(doc.get("rdma_bw", False)))
        except (TypeError, ValueError):
            return None

    def describe(self) -> str:
        """``busbw >= 40 GB/s at 1 GiB (all_reduce, nccl, Ring)``, for messages."""
        if self.busbw_gbps is None:
            text = f"no bandwidth mark ({self.collective}, {self.backend})"
        else:
            extra = f", {self.algorithm}" if self.algorithm else ""
            text = (f"busbw >= {self.busbw_gbps:g} GB/s at {_size(self.at_bytes)} "
                    f"({self.collective}, {self.backend}{extra})")
        if self.expect_transport != "any":
            text += f", expecting {self.expect_transport}"
        return text + (", with ib_write_bw" if self.rdma_bw else "")

    def covers(self, drained: PassMark) -> str | None:
        """Why this pass is not at least as strict as the mark that ``drained`` (None: it is).

        The same test (collective, backend), a bandwidth mark no lower, judged at a size
        no larger (busbw only grows with the size), the algorithm the drain forced, the
        transport it expected, and ib_write_bw if it ran it.
        """
        if (self.collective, self.backend) != (drained.collective, drained.backend):
            return (f"drained by {drained.collective} over {drained.backend}; this run "
                    f"measured {self.collective} over {self.backend}")
        if drained.busbw_gbps is not None:
            if self.busbw_gbps is None:
                return ("this run judged no bandwidth (no --profile, --min-busbw or inventory "
                        f"pass mark); the drain's mark was {drained.describe()}")
            if self.busbw_gbps < drained.busbw_gbps:
                return (f"this run's mark {self.busbw_gbps:g} GB/s is below the drain's "
                        f"{drained.busbw_gbps:g} GB/s")
            if (self.at_bytes or 0) > (drained.at_bytes or 0):
                return (f"this run judged busbw at {_size(self.at_bytes)}, a larger size "
                        f"than the drain's {_size(drained.at_bytes)} (busbw grows with size)")
            if drained.algorithm and self.algorithm != drained.algorithm:
                return (f"the drain's mark forced NCCL_ALGO={drained.algorithm}; this run "
                        f"{'forced ' + self.algorithm if self.algorithm else 'let NCCL choose'}")
        if drained.expect_transport not in ("any", self.expect_transport):
            return (f"the drain expected {drained.expect_transport}; this run expected "
                    f"{self.expect_transport}")
        if drained.rdma_bw and not self.rdma_bw:
            return "the drain ran ib_write_bw (--rdma-bw); this run did not"
        return None


def untested(drained_for: Iterable[str], results: Iterable[tuple[str, str]],
             not_run: Collection[str] = ()) -> tuple[str, ...]:
    """The checks of ``drained_for`` (check names, ``base[item]`` for an item) that a run
    whose results are ``results`` ((name, status) pairs) did not test again.

    A check is tested again where its results (its exact name's, else, the item gone,
    its base check's) hold no failure and either all passed or warned, or the run asked
    for the check (``not_run``: the checks it chose not to run, such as an active check
    skipped by an option or a state-only mode) and it found nothing to check (a skip:
    the device is gone). A check with no result at all is not tested.
    """
    by_name: dict[str, set[str]] = {}
    for name, status in results:
        by_name.setdefault(name, set()).add(status)
        if "[" in name:
            by_name.setdefault(_base(name), set()).add(status)
    left = []
    for name in drained_for:
        seen = by_name.get(name) or by_name.get(_base(name)) or {"fail"}
        if "fail" in seen or ("skip" in seen and _base(name) in not_run):
            left.append(name)
    return tuple(left)


def _base(name: str) -> str:
    """``fabric.mtu[eth1]`` -> ``fabric.mtu``."""
    return name.split("[", 1)[0]


@dataclass(frozen=True, slots=True)
class CheckMark:
    """What a ``check`` run found on a node, for a resume: each check's (name, status), and
    the active checks the run chose not to run (``--skip-allreduce``: gpu.allreduce,
    ``--dcgm-level 0``: dcgm.diag, no ``--rdma-peer``: fabric.rdma_bw).

    A check drain records the checks that failed (its action's ``failed_checks``); a
    resume needs each of them tested again (:meth:`covers`, :func:`untested`).
    """

    results: tuple[tuple[str, str], ...] = ()
    not_run: frozenset[str] = frozenset()
    dcgm_level: int = 0  # the run's --dcgm-level (dcgmi diag -r LEVEL; 0: not run)

    def covers(self, drained_for: Iterable[str] | None,
               drained_level: int | None = None) -> str | None:
        """Why this run may not lift a check drain for ``drained_for`` (None: it may).

        None (a drain recorded before its checks were) is lifted only by a run that
        skipped no active check (no ``--skip-allreduce``, ``--dcgm-level`` 1 or more). A
        drain for dcgm.diag at ``drained_level`` needs a run at that level or deeper: a
        level 1 pass does not run the level 3 memory and stress tests that failed.
        """
        if drained_for is None:
            return None if not self.not_run & {"gpu.allreduce", "dcgm.diag"} else (
                "the drain's record does not name the checks that failed, and this run "
                "skipped an active check (--skip-allreduce or --dcgm-level 0)")
        drained_for = tuple(drained_for)
        left = untested(drained_for, self.results, self.not_run)
        if left:
            return f"drained for {', '.join(left)}, which this run did not pass"
        if "dcgm.diag" in drained_for and drained_level and self.dcgm_level < drained_level:
            return (f"drained for dcgm.diag at --dcgm-level {drained_level}; this run's level "
                    f"{self.dcgm_level} does not run that level's tests")
        return None


def weakest(marks: Iterable[PassMark]) -> PassMark | None:
    """The least any of ``marks`` proves, field by field (None: no mark)."""
    marks = list(marks)
    if not marks:
        return None
    values = [m.busbw_gbps for m in marks]
    sizes = [m.at_bytes or 0 for m in marks]
    return PassMark(busbw_gbps=None if None in values else min(v or 0.0 for v in values),
                    at_bytes=max(sizes) or None, collective=_same(m.collective for m in marks),
                    backend=_same(m.backend for m in marks),
                    algorithm=_same((m.algorithm or "" for m in marks), "") or None,
                    expect_transport=_same((m.expect_transport for m in marks), "any"),
                    rdma_bw=all(m.rdma_bw for m in marks))


def strictest(marks: Iterable[PassMark]) -> PassMark | None:
    """The most any of ``marks`` asked, field by field (None: no mark)."""
    marks = list(marks)
    if not marks:
        return None
    values = [m.busbw_gbps for m in marks if m.busbw_gbps is not None]
    sizes = [m.at_bytes for m in marks if m.at_bytes]
    expects = {m.expect_transport for m in marks} - {"any"}
    algorithms = {m.algorithm for m in marks} - {None}
    return PassMark(busbw_gbps=max(values) if values else None,
                    at_bytes=min(sizes) if sizes else None,
                    collective=_same(m.collective for m in marks),
                    backend=_same(m.backend for m in marks),
                    algorithm=algorithms.pop() if len(algorithms) == 1 else (
                        "mixed" if algorithms else None),
                    expect_transport=expects.pop() if len(expects) == 1 else (
                        "mixed" if expects else "any"),
                    rdma_bw=any(m.rdma_bw for m in marks))


def _size(n: int | None) -> str:
    """4194304 -> '4 MiB' (as validate writes sizes)."""
    if n is None:
        return "an unknown size"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _same(values: Iterable[str], differ: str = "mixed") -> str:
    """The one value all share, else ``differ`` (which no other mark matches)."""
    found = set(values)
    return found.pop() if len(found) == 1 else differ
