"""Value types of a validation and the verdict over them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from nodetune.collective.datapath import DataPath, label
from nodetune.measure.jitter import Straggler
from nodetune.measure.nccl_log import NcclTransport
from nodetune.measure.sweep import SizeResult, human_bytes
from nodetune.measure.thresholds import Threshold
from nodetune.slurm.policy import PassMark, strictest, weakest
from nodetune.verdicts import NodeState, NodeVerdict


class Verdict(Enum):
    """Outcome for a pair."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Transport:
    """The path the measurement took between the two nodes."""

    backend: str                    # "nccl" or "gloo"
    kind: str                       # "IB", "RoCE", "Socket", "gloo/TCP", "unknown"
    interfaces: tuple[str, ...] = ()
    gdrdma: bool = False
    local_paths: tuple[str, ...] = ()
    net_paths: tuple[str, ...] = ()
    algorithm: str | None = None    # at the largest size, e.g. "Ring/Simple"
    algorithm_source: str = ""      # "NCCL_ALGO=Ring", "NCCL TUNING log", ...
    nccl_version: str | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_nccl(cls, log: NcclTransport, *, largest: int, forced_algo: str | None) -> Transport:
        """Summarise a parsed NCCL log."""
        algo = log.algorithm_at(largest)
        if forced_algo:
            algorithm, source = forced_algo, f"NCCL_ALGO={forced_algo}"
        elif algo:
            algorithm, source = f"{algo[0]}/{algo[1]}", "NCCL TUNING log"
        else:
            algorithm, source = None, "not logged (NCCL default: ring or tree)"
        ifaces = log.ib_devices if log.kind in ("IB", "RoCE") else log.socket_devices
        return cls(backend="nccl", kind=log.kind, interfaces=ifaces, gdrdma=log.gdrdma,
                   local_paths=log.local_paths, net_paths=log.net_paths, algorithm=algorithm,
                   algorithm_source=source, nccl_version=log.version, warnings=log.warnings)

    @classmethod
    def gloo(cls, interfaces: tuple[str, ...]) -> Transport:
        """gloo always talks TCP over the interface it was given."""
        return cls(backend="gloo", kind="gloo/TCP", interfaces=interfaces,
                   algorithm="gloo ring", algorithm_source="gloo's allreduce (no NCCL)")


def transport_matches(transport: Transport, expect: str) -> str | None:
    """None when ``transport`` is what ``--expect-transport`` asked for, else the reason."""
    if expect == "any":
        return None
    if expect == "ib":
        if transport.kind in ("IB", "RoCE"):
            return None
        if transport.backend == "gloo":
            return "expected IB but the gloo backend only uses TCP sockets; run with NCCL on GPUs"
        if transport.kind == "local":
            return ("expected IB but NCCL crossed no network: both nodes' GPUs are in one host "
                    f"({', '.join(transport.local_paths)}); pick hosts on different machines")
        return (f"expected IB but NCCL used {transport.kind}; check /dev/infiniband in the "
                "container, NCCL_IB_HCA, NCCL_IB_DISABLE and that the IB/RoCE ports are up "
                "(ibv_devinfo)")
    if transport.kind in ("Socket", "gloo/TCP"):
        return None
    return f"expected socket transport but got {transport.kind}"


@dataclass(frozen=True, slots=True)
class PairResult:
    """Everything a validation of two nodes (or, ``--all``, a group of more) found."""

    hosts: tuple[str, ...]
    backend: str
    nproc_per_node: int
    world: int
    sizes: tuple[SizeResult, ...]
    transport: Transport
    verdict: Verdict
    reasons: tuple[str, ...]
    notes: tuple[str, ...] = ()
    threshold: Threshold | None = None
    expect_transport: str = "any"
    phases_s: dict[str, float] = field(default_factory=dict)
    paths: tuple[DataPath, ...] = ()      # each node's data interface and SSH's
    warnings: tuple[str, ...] = ()        # e.g. the data path is the SSH interface
    collective: str = "all_reduce"        # what was timed (busbw with its nccl-tests factor)
    straggler: Straggler | None = None    # the rank consistently the slowest (measure/jitter.py)
    # per node: the NCCL configuration its ranks used, and nccl.effective (nccl_effective.py)
    nccl_effective: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """Transport and interface, as every pair row shows them: ``gloo/TCP eth1``."""
        return label(self.transport.kind, self.transport.interfaces)

    @property
    def largest(self) -> SizeResult | None:
        """The row at the largest size measured."""
        return max(self.sizes, key=lambda s: s.bytes) if self.sizes else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for report.json."""
        doc = asdict(self)
        doc["verdict"] = self.verdict.value
        doc.pop("nccl_effective", None)  # report.json's own section (validate/verb.py)
        big = self.largest
        doc["largest_busbw_gbps"] = big.busbw if big else None
        doc["paths"] = [p.to_dict() for p in self.paths]
        doc["path"] = self.path
        return doc

    def pass_mark(self, *, rdma_bw: bool = False) -> PassMark:
        """What this test judged its nodes by (a drain records it; a resume compares it):
        the busbw mark at the largest size, the test, a forced NCCL algorithm, the transport
        expected, and ``rdma_bw`` (whether ib_write_bw ran with it)."""
        big = self.largest
        forced = self.transport.algorithm_source.startswith("NCCL_ALGO=")
        return PassMark(busbw_gbps=self.threshold.min_busbw_gbps if self.threshold else None,
                        at_bytes=big.bytes if big else None, collective=self.collective,
                        backend=self.backend,
                        algorithm=self.transport.algorithm if forced else None,
                        expect_transport=self.expect_transport, rdma_bw=rdma_bw)


def node_marks(results: Iterable[PairResult], nodes: Iterable[str], *, good: Iterable[str],
               rdma_bw: bool = False, rdma_measured: Iterable[str] | None = None
               ) -> dict[str, PassMark | None]:
    """Each node's pass mark in a run of these tests: for a ``good`` node the least its
    passing tests proved (a resume must match the drain's mark with it), for any other the
    most its tests asked (a drain records it, and a later pass must match it). None: no
    such test. ``rdma_measured``: the nodes whose ib_write_bw measured a port (None: every
    node, where ``rdma_bw``); a good node's mark holds ib_write_bw only where it did, so a
    run that measured no port lifts no drain that needed one."""
    results = list(results)
    good = set(good)
    measured = None if rdma_measured is None else set(rdma_measured)
    marks: dict[str, PassMark | None] = {}
    for node in nodes:
        mine = [r for r in results if node in r.hosts]
        if node in good:
            proved = rdma_bw and (measured is None or node in measured)
            marks[node] = weakest(r.pass_mark(rdma_bw=proved) for r in mine
                                  if r.verdict is Verdict.PASS)
        else:
            marks[node] = strictest(r.pass_mark(rdma_bw=rdma_bw) for r in mine)
    return marks


def good_nodes(verdicts: Mapping[str, NodeVerdict]) -> list[str]:
    """The nodes whose verdict is good."""
    return [n for n, v in verdicts.items() if v.state is NodeState.GOOD]


def evaluate(sizes: tuple[SizeResult, ...], transport: Transport, *,
             threshold: Threshold | None, expect: str,
             over_ssh: str | None = None) -> tuple[Verdict, tuple[str, ...], tuple[str, ...]]:
    """Judge a measurement. ``over_ssh`` (the data path was the SSH interface) fails it when
    a transport was expected: the expectation was about the fabric, not the management network.

    Returns:
        (verdict, reasons it failed, notes that qualify a pass or fail)
    """
    reasons: list[str] = []
    notes: list[str] = []
    if not sizes:
        reasons.append("no size was measured")
    for row in sizes:
        if row.wrong:
            reasons.append(f"{row.wrong} wrong values at {human_bytes(row.bytes)}: the data "
                           "the ranks summed is corrupt (GPU/NIC/driver fault, not tuning)")
    big = max(sizes, key=lambda s: s.bytes) if sizes else None
    if threshold is not None and big is not None:
        if big.busbw < threshold.min_busbw_gbps:
            reasons.append(f"busbw {big.busbw:.2f} GB/s at {human_bytes(big.bytes)} is below "
                           f"{threshold.min_busbw_gbps:g} GB/s ({threshold.origin})")
        prof = threshold.profile
        if prof is not None and big.bytes < prof.at_bytes:
            notes.append(f"profile {prof.name} states its number at {human_bytes(prof.at_bytes)}"
                         f"; the sweep stopped at {human_bytes(big.bytes)}, where busbw is lower")
    elif threshold is None:
        notes.append("no bandwidth threshold set (--min-busbw, --profile or inventory "
                     "nodetune_validate_min_busbw_gbps): bandwidth reported, not judged")
    if (problem := transport_matches(transport, expect)) is not None:
        reasons.append(problem)
    elif over_ssh and expect != "any":
        reasons.append(f"expected {expect} over the fabric, but {over_ssh}")
    if transport.backend == "gloo":
        notes.append("gloo backend: CPU tensors over TCP; NCCL transports (IB, RoCE, GDRDMA) "
                     "were not exercised")
    return (Verdict.FAIL if reasons else Verdict.PASS), tuple(reasons), tuple(notes)
