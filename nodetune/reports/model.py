"""Read a run record (``report.json``) into the shapes every report format shares.

Run records come in two generations: a two-node ``validate`` writes one
``result`` (``PairResult.to_dict()``); a fleet ``validate`` and ``check`` write
``pairs``, ``nodes`` and ``checks`` (the shared contract in DESIGN.md). The
renderers read both through these functions, so they never guess at keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodetune.verdicts import NodeState

Doc = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Size:
    """One measured message size of a pair."""

    bytes: int
    busbw: float
    algbw: float
    time_us: float
    wrong: int
    cv_pct: float | None = None     # the rounds' CV (nccl-tests -I i_cv%), when recorded


@dataclass(frozen=True, slots=True)
class Pair:
    """One pair test (or a job-wide group of more nodes, ``validate --all``): who, which
    round, verdict and the curve."""

    hosts: tuple[str, ...]
    round: int
    verdict: str
    reason: str
    busbw_gbps: float | None
    threshold_gbps: float | None
    sizes: tuple[Size, ...]
    path: str | None = None              # transport and interface: "gloo/TCP eth1"
    warnings: tuple[str, ...] = ()       # e.g. the data path was the SSH interface

    @property
    def name(self) -> str:
        """``a <-> b``; a group: ``all of a, b, c``."""
        if len(self.hosts) == 2:
            return f"{self.hosts[0]} <-> {self.hosts[1]}"
        return "all of " + ", ".join(self.hosts)

    @property
    def label(self) -> str:
        """:attr:`name`, with the round when it is not the first."""
        return self.name + (f" (round {self.round})" if self.round > 1 else "")

    def peer(self, node: str) -> str:
        """Who ``node`` was measured with: its partner, or ``all`` in a group."""
        if len(self.hosts) == 2:
            return self.hosts[1] if self.hosts[0] == node else self.hosts[0]
        return "all"

    @property
    def largest(self) -> Size | None:
        """The row at the largest size."""
        return max(self.sizes, key=lambda s: s.bytes) if self.sizes else None


@dataclass(frozen=True, slots=True)
class Node:
    """One node's verdict as ``report.json``'s ``nodes[NAME]`` holds it."""

    name: str
    verdict: str
    reason: str
    partners: tuple[str, ...]
    busbw_gbps: float | None
    action: str = ""  # what to do about it (nodetune.action); "" where not judged

    @property
    def order(self) -> int:
        """Sort key: bad first, good last (``NodeState.order``), unknown words after bad."""
        try:
            return NodeState(self.verdict).order
        except ValueError:
            return 1

    @property
    def healthy(self) -> bool:
        """Whether the verdict is good."""
        return self.verdict == NodeState.GOOD.value


@dataclass(frozen=True, slots=True)
class Check:
    """One check on one node."""

    node: str
    name: str
    status: str
    measured: str
    expected: str
    message: str
    source: str
    action: str = ""  # what to do about it (nodetune.action); "" in older records


def _float(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _sizes(rows: object) -> tuple[Size, ...]:
    out = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, Mapping):
            continue
        busbw = _float(row.get("busbw"))
        nbytes = _int(row.get("bytes"), -1)
        if busbw is None or nbytes <= 0:
            continue
        per_iter = row.get("per_iter")
        out.append(Size(bytes=nbytes, busbw=busbw, algbw=_float(row.get("algbw")) or 0.0,
                        time_us=_float(row.get("time_us")) or 0.0, wrong=_int(row.get("wrong")),
                        cv_pct=_float(per_iter.get("cv_pct"))
                        if isinstance(per_iter, Mapping) else None))
    return tuple(sorted(out, key=lambda s: s.bytes))


def _hosts(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list | tuple) and len(value) >= 2:
        return tuple(str(v) for v in value)
    return None


def path_of(pair: Mapping[str, Any]) -> str | None:
    """A pair's transport and interface, ``gloo/TCP eth1``: as written, or (records written
    before pairs carried it) from the two-node result's ``transport``."""
    if isinstance(pair.get("path"), str) and pair["path"]:
        return str(pair["path"])
    transport = pair.get("transport")
    if isinstance(transport, Mapping) and transport.get("kind"):
        ifaces = transport.get("interfaces")
        names = ",".join(str(i) for i in ifaces) if isinstance(ifaces, list) else ""
        return " ".join(x for x in (str(transport["kind"]), names) if x)
    return None


def _warnings(value: object) -> tuple[str, ...]:
    return tuple(str(w) for w in value) if isinstance(value, list) else ()


def pairs_of(doc: Doc) -> list[Pair]:
    """Every pair test in the record: ``pairs`` (fleet), else the one ``result`` (two nodes)."""
    out: list[Pair] = []
    if isinstance(doc.get("pairs"), list):
        for p in doc["pairs"]:
            if not isinstance(p, Mapping) or (hosts := _hosts(p.get("hosts"))) is None:
                continue
            out.append(Pair(hosts=hosts, round=_int(p.get("round"), 1),
                            verdict=str(p.get("verdict", "")), reason=str(p.get("reason") or ""),
                            busbw_gbps=_float(p.get("busbw_gbps")),
                            threshold_gbps=_float(p.get("threshold_gbps")),
                            sizes=_sizes(p.get("sizes")), path=path_of(p),
                            warnings=_warnings(p.get("warnings"))))
        return out
    result = doc.get("result")
    if isinstance(result, Mapping) and (hosts := _hosts(result.get("hosts"))) is not None:
        threshold = result.get("threshold")
        out.append(Pair(
            hosts=hosts, round=1, verdict=str(result.get("verdict", "")),
            reason="; ".join(str(r) for r in result.get("reasons") or []),
            busbw_gbps=_float(result.get("largest_busbw_gbps")),
            threshold_gbps=_float(threshold.get("min_busbw_gbps"))
            if isinstance(threshold, Mapping) else None,
            sizes=_sizes(result.get("sizes")), path=path_of(result),
            warnings=_warnings(result.get("warnings"))))
    return out


def nodes_of(doc: Doc) -> list[Node]:
    """Per-node verdicts, worst first: ``nodes`` when written, else derived from a two-node run.

    A two-node run that passed makes both nodes good; one that failed makes both
    unresolved (one pair cannot say which node is at fault); one that ended in
    an infrastructure error (exit 3) names the node the error names as
    unreachable.
    """
    nodes: list[Node] = []
    raw = doc.get("nodes")
    if isinstance(raw, Mapping):
        for name, v in raw.items():
            if not isinstance(v, Mapping):
                continue
            nodes.append(Node(name=str(name), verdict=str(v.get("verdict", "")),
                              reason=str(v.get("reason") or ""),
                              partners=tuple(str(p) for p in v.get("partners") or []),
                              busbw_gbps=_float(v.get("busbw_gbps")),
                              action=str(v.get("action") or "")))
    else:
        pairs = pairs_of(doc)
        if len(pairs) == 1:
            p = pairs[0]
            good = p.verdict == "pass"
            for me in p.hosts:
                nodes.append(Node(name=me, verdict="good" if good else "unresolved",
                                  reason="" if good else p.reason,
                                  partners=tuple(h for h in p.hosts if h != me),
                                  busbw_gbps=p.busbw_gbps))
        elif (isinstance(doc.get("error"), Mapping) and doc["error"].get("host")
              and doc.get("exit_code") == 3):  # bad input naming a host says nothing of it
            err = doc["error"]
            nodes.append(Node(name=str(err["host"]), verdict="unreachable",
                              reason=str(err.get("message") or ""), partners=(),
                              busbw_gbps=None))
    return sorted(nodes, key=lambda n: (n.order, n.name))


def checks_of(doc: Doc, section: str = "checks") -> list[Check]:
    """Every check result, node by node, in the order written (``section``: ``checks``, or
    ``rdma_bw``, validate --rdma-bw's ib_write_bw results in the same form)."""
    out: list[Check] = []
    raw = doc.get(section)
    if not isinstance(raw, Mapping):
        return out
    for node, rows in raw.items():
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, Mapping):
                out.append(Check(node=str(node), name=str(row.get("name", "?")),
                                 status=str(row.get("status", "")),
                                 measured=str(row.get("measured") or ""),
                                 expected=str(row.get("expected") or ""),
                                 message=str(row.get("message") or ""),
                                 source=str(row.get("source") or ""),
                                 action=str(row.get("action") or "")))
    return out


def collective(doc: Doc) -> str:
    """The collective the run timed (``validate --collective``; all_reduce before it existed)."""
    options = doc.get("options")
    if isinstance(options, Mapping) and options.get("collective"):
        return str(options["collective"])
    return "all_reduce"


def profile_name(doc: Doc) -> str | None:
    """The threshold profile the run judged against, if any."""
    options = doc.get("options")
    if isinstance(options, Mapping) and options.get("profile"):
        return str(options["profile"])
    result = doc.get("result")
    if isinstance(result, Mapping):
        threshold = result.get("threshold")
        if isinstance(threshold, Mapping) and isinstance(threshold.get("profile"), Mapping):
            return str(threshold["profile"].get("name") or "") or None
    return None
