"""Each node's validate results over runs, and the check that catches a node getting slower.

The store is the run records themselves (``.nodetune/runs/*-validate/report.json``):
they already hold every pair's full curve and every node's verdict, they are
written whatever ends a run, and an operator can copy, prune or archive them
with ordinary tools. A second store (SQLite) would have to be kept in step
with them and could disagree; reading a few hundred small JSON files takes
milliseconds. ``MAX_RECORDS`` bounds the scan on a controller that keeps years.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodetune.reports import model

MAX_RECORDS = 2000   # newest validate records read for history
WINDOW = 5           # passing runs the median is taken over
DEFAULT_MAX_REGRESSION = 0.10
# A node got noisier when the CV of its rounds at a size (nccl-tests -I i_cv%) is more
# than NOISE_FACTOR times the median of its baseline's at that size, and at least
# NOISE_FLOOR_PCT: below that the rounds agree within what nccl-tests' own analysis
# script (tools/analyze_perf_json.py, print_stats_table) leaves unmarked (cv_pct > 5).
NOISE_FACTOR = 2.0
NOISE_FLOOR_PCT = 5.0


@dataclass(frozen=True, slots=True)
class Observation:
    """One node in one validate run: its busbw at the largest size, and its verdict."""

    run_id: str
    started: str
    node: str
    verdict: str
    busbw_gbps: float | None
    bytes: int | None
    partners: tuple[str, ...]
    profile: str | None
    verb: str = "validate"
    path: str | None = None   # transport and interface of its pairs: "gloo/TCP eth1"
    collective: str = "all_reduce"  # validate --collective: busbw of one is no baseline of another
    # (bytes, CV %) per size: the rounds' CV, the worst of the node's pairs at that size
    cv_pct: tuple[tuple[int, float], ...] = ()

    @property
    def passed(self) -> bool:
        """Whether the node's verdict in that run was good."""
        return self.verdict == "good"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "started": self.started, "node": self.node,
                "verdict": self.verdict, "busbw_gbps": self.busbw_gbps, "bytes": self.bytes,
                "partners": list(self.partners), "profile": self.profile, "verb": self.verb,
                "path": self.path, "collective": self.collective,
                "cv_pct": {str(b): cv for b, cv in self.cv_pct}}


def _over(path: str | None, profile: str | None) -> str:
    """`` over PATH on profile NAME`` (each part only where known), for a message's end."""
    return (f" over {path}" if path else "") + (f" on profile {profile}" if profile else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class _AgainstBaseline:
    """What a finding against a node's own recent passing runs holds in common."""

    node: str
    bytes: int
    profile: str | None
    baseline_runs: tuple[str, ...]
    path: str | None = None

    def _since(self) -> str:
        """`` of its last N passing runs over PATH on profile NAME``."""
        return (f" of its last {len(self.baseline_runs)} passing runs"
                + _over(self.path, self.profile))

    def _common(self) -> dict[str, Any]:
        return {"node": self.node, "bytes": self.bytes, "profile": self.profile,
                "path": self.path, "baseline_runs": list(self.baseline_runs)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Regression(_AgainstBaseline):
    """A node whose busbw fell more than allowed below its own recent median."""

    busbw_gbps: float
    median_gbps: float
    drop: float              # fraction below the median, 0.15 = 15 % slower

    @property
    def message(self) -> str:
        """One line for people."""
        return (f"{self.node}: busbw {self.busbw_gbps:.2f} GB/s at {self.bytes} bytes is "
                f"{self.drop:.0%} below the median {self.median_gbps:.2f} GB/s"
                + self._since())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``regressions[]``."""
        return {"kind": "busbw", **self._common(), "busbw_gbps": self.busbw_gbps,
                "median_gbps": round(self.median_gbps, 4), "drop": round(self.drop, 4),
                "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class Noisier(_AgainstBaseline):
    """A node whose rounds at a size vary far more than in its own recent runs."""

    cv_pct: float
    median_cv_pct: float

    @property
    def message(self) -> str:
        """One line for people."""
        return (f"{self.node}: the CV of its rounds at {self.bytes} bytes is "
                f"{self.cv_pct:.1f} %, {self.cv_pct / self.median_cv_pct:.1f}x the median "
                f"{self.median_cv_pct:.1f} %" + self._since())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``regressions[]`` (``kind`` ``noise``)."""
        return {"kind": "noise", **self._common(), "cv_pct": round(self.cv_pct, 4),
                "median_cv_pct": round(self.median_cv_pct, 4), "message": self.message}


def _cv_by_size(pairs: Iterable[model.Pair]) -> tuple[tuple[int, float], ...]:
    worst: dict[int, float] = {}
    for pair in pairs:
        for size in pair.sizes:
            if size.cv_pct is not None:
                worst[size.bytes] = max(size.cv_pct, worst.get(size.bytes, size.cv_pct))
    return tuple(sorted(worst.items()))


def observations(doc: Mapping[str, Any]) -> list[Observation]:
    """Every node of one validate or check record, with the busbw it reached (validate)."""
    if doc.get("verb") not in (None, "validate", "check"):
        return []
    pairs = model.pairs_of(doc)
    profile = model.profile_name(doc)
    out = []
    for node in model.nodes_of(doc):
        mine = [p for p in pairs if node.name in p.hosts and p.largest is not None]
        largest = max((p.largest.bytes for p in mine if p.largest), default=None)
        busbw = node.busbw_gbps
        if busbw is None and largest is not None:
            at_max = [p.largest.busbw for p in mine if p.largest and p.largest.bytes == largest]
            busbw = min(at_max) if at_max else None
        paths = sorted({p.path or "-" for p in mine if p.largest and p.largest.bytes == largest})
        out.append(Observation(
            run_id=str(doc.get("run_id", "")), started=str(doc.get("started", "")),
            node=node.name, verdict=node.verdict, busbw_gbps=busbw, bytes=largest,
            partners=node.partners, profile=profile, verb=str(doc.get("verb") or "validate"),
            path=" + ".join(paths) or None, collective=model.collective(doc),
            cv_pct=_cv_by_size(mine)))
    return out


def load_records(runs_dir: Path, *, verbs: tuple[str, ...] = ("validate",),
                 limit: int = MAX_RECORDS) -> list[dict[str, Any]]:
    """The newest ``limit`` readable records of ``verbs`` under ``runs_dir``, oldest first."""
    if not runs_dir.is_dir():
        return []
    dirs = sorted((p for p in runs_dir.iterdir()
                   if not p.is_symlink() and p.is_dir()
                   and any(f"-{v}" in p.name for v in verbs)),
                  key=lambda p: p.name)[-limit:]
    docs = []
    for path in dirs:
        try:
            doc = json.loads((path / "report.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("verb") in verbs:
            docs.append(doc)
    return docs


def node_history(node: str, records: Iterable[Mapping[str, Any]]) -> list[Observation]:
    """``node``'s observations across ``records``, oldest first."""
    return [o for doc in records for o in observations(doc) if o.node == node]


def _earlier(doc: Mapping[str, Any],
             records: Iterable[Mapping[str, Any]]) -> dict[str, list[Observation]]:
    """Each node's observations in the validate records of ``records`` other than ``doc``
    itself, oldest first: what a baseline is taken from."""
    run_id = doc.get("run_id")
    history: dict[str, list[Observation]] = {}
    for old in records:
        if old.get("run_id") == run_id or old.get("verb") != "validate":
            continue
        for o in observations(old):
            history.setdefault(o.node, []).append(o)
    return history


def _comparable(old: Observation, now: Observation) -> bool:
    """``old`` may stand in ``now``'s baseline: it passed, at the same largest message size,
    on the same profile and collective, over the same transport and interface."""
    return (old.passed and old.bytes == now.bytes and old.profile == now.profile
            and old.path == now.path and old.collective == now.collective)


def find_regressions(doc: Mapping[str, Any], records: Iterable[Mapping[str, Any]], *,
                     max_regression: float = DEFAULT_MAX_REGRESSION,
                     window: int = WINDOW) -> list[Regression]:
    """Nodes of ``doc`` whose busbw fell more than ``max_regression`` below their baseline.

    The baseline is the median busbw of the node's last ``window`` passing runs
    in ``records`` on the same profile and collective, at the same largest message
    size and over the same transport and interface (a run over the management
    network is no baseline for one over the fabric, an all_gather none for an
    all_reduce). ``doc`` itself is never part of its own
    baseline.
    """
    history = _earlier(doc, records)
    found = []
    for now in observations(doc):
        if now.busbw_gbps is None or now.bytes is None:
            continue
        baseline = [o for o in history.get(now.node, [])
                    if _comparable(o, now) and o.busbw_gbps is not None][-window:]
        if not baseline:
            continue
        median = statistics.median(o.busbw_gbps for o in baseline if o.busbw_gbps is not None)
        if median <= 0:
            continue
        drop = 1.0 - now.busbw_gbps / median
        if drop > max_regression:
            found.append(Regression(node=now.node, busbw_gbps=now.busbw_gbps, median_gbps=median,
                                    drop=drop, bytes=now.bytes, profile=now.profile,
                                    baseline_runs=tuple(o.run_id for o in baseline),
                                    path=now.path))
    return found


def find_noisier(doc: Mapping[str, Any], records: Iterable[Mapping[str, Any]], *,
                 factor: float = NOISE_FACTOR, floor_pct: float = NOISE_FLOOR_PCT,
                 window: int = WINDOW) -> list[Noisier]:
    """Nodes of ``doc`` whose rounds got noisier: at some size, a CV more than ``factor``
    times the median CV of the node's last ``window`` passing runs with a CV at that size
    (same baseline rules as :func:`find_regressions`), and at least ``floor_pct``. A node
    is named once, at the size where its CV rose the most."""
    history = _earlier(doc, records)
    found = []
    for now in observations(doc):
        risen = []
        for nbytes, cv in now.cv_pct:
            baseline = [o for o in history.get(now.node, [])
                        if _comparable(o, now) and nbytes in dict(o.cv_pct)][-window:]
            if not baseline or cv < floor_pct:
                continue
            median = statistics.median(dict(o.cv_pct)[nbytes] for o in baseline)
            if median <= 0:  # sizes timed in one round: no spread to compare with
                continue
            if cv > factor * median:
                risen.append(Noisier(node=now.node, cv_pct=cv, median_cv_pct=median,
                                     bytes=nbytes, profile=now.profile, path=now.path,
                                     baseline_runs=tuple(o.run_id for o in baseline)))
        worst = max(risen, key=lambda n: n.cv_pct / max(n.median_cv_pct, 1e-9), default=None)
        if worst is not None:
            found.append(worst)
    return found


def regressions(doc: Mapping[str, Any], runs_dir: Path, *,
                max_regression: float = DEFAULT_MAX_REGRESSION) -> list[Regression | Noisier]:
    """``find_regressions`` and ``find_noisier`` against the validate records under
    ``runs_dir``."""
    records = load_records(runs_dir)
    slower: list[Regression | Noisier] = list(
        find_regressions(doc, records, max_regression=max_regression))
    return slower + list(find_noisier(doc, records))


def history_of(node: str, runs_dir: Path) -> list[Observation]:
    """``node``'s results in every validate and check record under ``runs_dir``, oldest first."""
    return node_history(node, load_records(runs_dir, verbs=("validate", "check")))


@dataclass(frozen=True, slots=True)
class RegressionPolicy:
    """``--max-regression`` (as a fraction) and ``--fail-on-regression``."""

    max_regression: float = DEFAULT_MAX_REGRESSION
    fail: bool = False


JUDGED = ("pass", "fail")  # a validate that ended with measurements (not an error or Ctrl-C)


def judge(doc: MutableMapping[str, Any], runs_dir: Path, policy: RegressionPolicy, *,
          exit_code: int) -> int:
    """Compare ``doc`` (a validate record about to be written) with the history under
    ``runs_dir``; add ``regressions``, ``max_regression`` and ``fail_on_regression`` to it.

    Returns the run's exit code: 1 instead of 0 when a node regressed and
    ``policy.fail`` is set (status ``fail``); any other code is kept, since a
    failed or broken run already says more than a slower node.
    """
    if doc.get("status") not in JUDGED:
        return exit_code
    # Judge the record as report.json will hold it (tuples from dataclasses become lists).
    as_written = json.loads(json.dumps(doc, default=str))
    found = regressions(as_written, runs_dir, max_regression=policy.max_regression)
    doc["max_regression"] = policy.max_regression
    doc["fail_on_regression"] = policy.fail
    doc["regressions"] = [r.to_dict() for r in found]
    if found and policy.fail and exit_code == 0:
        doc["status"] = "fail"
        doc["exit_code"] = exit_code = 1
    return exit_code
