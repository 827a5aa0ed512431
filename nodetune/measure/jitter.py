"""Jitter and stragglers: the per-round statistics nccl-tests ``-I`` reports, and the rank
that is consistently the slowest.

The worker keeps every timed round of a size (``iters`` ops back to back, then one
sync: nccl-tests' BenchTime) and sends each rank's round times. A round's time is
the round's host wall time divided by ``iters``, so one sample here is the mean op of
a round, where nccl-tests ``-I`` times each op on its own with CUDA events.

The definitions follow nccl-tests 2.19.6 (NVIDIA/nccl-tests, commit a0b82b2,
"NCCL_TESTS_VERSION 2.19.6", 2026-07-09; read 2026-11-29):

- ``src/common.cu`` BenchTime, ``GatherProcessMaxIterTimes`` and
  ``ReduceProcessMaxIterTimes``: one row of iteration times per process
  (``per_process_max_times_us``), and ``times_us`` the maximum over those rows at
  each iteration; the statistics are taken over ``times_us``.
- ``src/util.cu`` ``computeIterStats``: min, max, mean, ``p50 = sorted[n/2]``, p95 and
  p99 by nearest rank (``percentileIndex``: ``min(n-1, (n*p+99)/100-1)``), and the
  population standard deviation (divided by n); ``writePerIterReport``:
  ``cv_pct = stdev / avg * 100`` (0 when avg is 0).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The straggler rule: a rank is named when its median round is the slowest of all ranks
# (ties name nobody at that size) and more than STRAGGLER_RATIO times the median rank's,
# at no fewer than STRAGGLER_SHARE of the sizes measured.
STRAGGLER_SHARE = 2 / 3
STRAGGLER_RATIO = 1.05


@dataclass(frozen=True, slots=True)
class PerIter:
    """nccl-tests' ``<placement>_per_iter`` object of one size (``-I``), in microseconds.

    ``times_us``: per round, the slowest rank's time (the maximum over
    ``per_process_max_times_us``); ``per_process_max_times_us``: each rank's rounds, in
    rank order. A round is ``iters`` ops timed together, its time the mean op.
    """

    min_us: float
    max_us: float
    avg_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    stdev_us: float
    cv_pct: float
    times_us: tuple[float, ...]
    per_process_max_times_us: tuple[tuple[float, ...], ...]
    skipped_iterations: int = 0   # nodetune warms up before timing; no round is skipped

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PerIter:
        """The object as report.json holds it (``asdict``: lists for tuples)."""
        return cls(**{**doc, "times_us": tuple(float(t) for t in doc["times_us"]),
                      "per_process_max_times_us": tuple(
                          tuple(float(t) for t in row)
                          for row in doc["per_process_max_times_us"])})


def _percentile_index(n: int, percentile: int) -> int:
    """nccl-tests' nearest-rank index (src/util.cu, percentileIndex)."""
    return min(n - 1, (n * percentile + 99) // 100 - 1)


def per_iter(rows: Sequence[Sequence[float]]) -> PerIter:
    """The ``-I`` statistics of one size from every rank's round times (µs).

    Raises:
        ValueError: no rows, an empty row, rows of different lengths or a time that is
            not a finite number >= 0.
    """
    table = tuple(tuple(float(t) for t in row) for row in rows)
    if not table or not table[0] or len({len(r) for r in table}) != 1:
        raise ValueError("round times: every rank needs the same, non-zero number of rounds")
    if any(not math.isfinite(t) or t < 0 for r in table for t in r):
        raise ValueError("round times must be finite and not negative")
    times = tuple(max(col) for col in zip(*table, strict=True))
    ordered = sorted(times)
    n = len(ordered)
    avg = sum(ordered) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in ordered) / n)
    return PerIter(min_us=ordered[0], max_us=ordered[-1], avg_us=avg, p50_us=ordered[n // 2],
                   p95_us=ordered[_percentile_index(n, 95)],
                   p99_us=ordered[_percentile_index(n, 99)], stdev_us=stdev,
                   cv_pct=stdev / avg * 100.0 if avg > 0 else 0.0,
                   times_us=times, per_process_max_times_us=table)


@dataclass(frozen=True, slots=True)
class Straggler:
    """The rank whose median round was the slowest at most sizes, and its node."""

    rank: int
    host: str
    slowest_sizes: int      # sizes at which it was the slowest beyond the spread
    sizes: int              # sizes with every rank's rounds
    ratio: float            # its median round / the median rank's, the median over those sizes

    @property
    def message(self) -> str:
        """One line for people."""
        return (f"rank {self.rank} on {self.host}: the slowest rank at {self.slowest_sizes} "
                f"of {self.sizes} sizes, {self.ratio:.2f}x the median rank")


def straggler(sizes: Sequence[PerIter | None], *, hosts: Sequence[str],
              nproc_per_node: int) -> Straggler | None:
    """The straggler among the ranks, or None when no rank is consistently the slowest.

    At each size, every rank's median round is compared: the slowest rank counts when it
    is alone at the top and more than :data:`STRAGGLER_RATIO` times the median of the
    ranks' medians. A rank that counts at no fewer than :data:`STRAGGLER_SHARE` of the
    sizes measured is named, with its node (rank ``r`` runs on ``hosts[r //
    nproc_per_node]``, the worker's numbering). One rank has no peer to be slower than.
    """
    measured = [s for s in sizes if s is not None and len(s.per_process_max_times_us) > 1]
    if not measured:
        return None
    counts: dict[int, list[float]] = {}
    for size in measured:
        medians = [statistics.median(row) for row in size.per_process_max_times_us]
        top = max(medians)
        if medians.count(top) > 1:
            continue
        middle = statistics.median(medians)
        if middle <= 0 or top <= STRAGGLER_RATIO * middle:
            continue
        counts.setdefault(medians.index(top), []).append(top / middle)
    if not counts:
        return None
    rank, ratios = max(counts.items(), key=lambda kv: len(kv[1]))
    if len(ratios) < STRAGGLER_SHARE * len(measured):
        return None
    node = rank // max(1, nproc_per_node)
    host = hosts[node] if node < len(hosts) else f"node rank {node}"
    return Straggler(rank=rank, host=host, slowest_sizes=len(ratios), sizes=len(measured),
                     ratio=round(statistics.median(ratios), 4))
