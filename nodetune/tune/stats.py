"""busbw per size per combination over the repeats, and the rule that recommends one.

A combination is recommended only when it beats the default beyond the spread: at the
largest size (the size validate judges) its slowest run is faster than the default's
fastest run by more than ``min_gain`` percent, and at no size is its fastest run slower
than the default's slowest (a setting forced for every size must not cost the small ones).
A run with a wrong sum disqualifies its combination. gloo reads no NCCL_* variable, so a
gloo measurement never recommends one: its differences are noise.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from nodetune.measure.sweep import SizeResult
from nodetune.tune.grid import Combo

DEFAULT_MIN_GAIN = 2.0   # percent beyond the spread


@dataclass(frozen=True, slots=True)
class Spread:
    """busbw (GB/s) at one size over the repeats of one combination."""

    bytes: int
    median: float
    low: float
    high: float
    runs: tuple[float, ...]
    wrong: int = 0

    @property
    def spread_pct(self) -> float:
        """(high - low) / median, in percent."""
        return 100.0 * (self.high - self.low) / self.median if self.median else 0.0


@dataclass(frozen=True, slots=True)
class Judged:
    """One combination against the default."""

    combo: Combo
    sizes: tuple[Spread, ...]
    verdict: str            # default | better | worse | within spread | wrong results
    gain_pct: float | None  # median at the largest size against the default's
    note: str = ""
    nccl_used: Mapping[str, Any] | None = None  # what NCCL's log says of its values (proof.py)

    def to_dict(self) -> dict[str, Any]:
        """The record's form."""
        return {"combo": self.combo.name, "env": dict(self.combo.env), "verdict": self.verdict,
                "gain_pct": self.gain_pct, "note": self.note,
                "sizes": [{**asdict(s), "spread_pct": round(s.spread_pct, 2)}
                          for s in self.sizes],
                **({"nccl_used": dict(self.nccl_used)} if self.nccl_used is not None else {})}


def spreads(runs: Sequence[Sequence[SizeResult]]) -> tuple[Spread, ...]:
    """Per size, busbw over the runs (each run: the sizes one measurement gave)."""
    by_size: dict[int, list[SizeResult]] = {}
    for run in runs:
        for row in run:
            by_size.setdefault(row.bytes, []).append(row)
    out = []
    for size in sorted(by_size):
        values = tuple(r.busbw for r in by_size[size])
        out.append(Spread(bytes=size, median=statistics.median(values), low=min(values),
                          high=max(values), runs=values,
                          wrong=sum(r.wrong for r in by_size[size])))
    return tuple(out)


def judge(combo: Combo, mine: Sequence[Spread], base: Sequence[Spread], *,
          min_gain: float) -> Judged:
    """``combo``'s verdict against the default's spreads (same sizes)."""
    sizes = tuple(mine)
    if combo.is_default:
        return Judged(combo, sizes, "default", 0.0)
    if any(s.wrong for s in sizes):
        return Judged(combo, sizes, "wrong results", None,
                      "a rank got a wrong sum: never recommended")
    base_at = {s.bytes: s for s in base}
    top, ref = sizes[-1], base_at[sizes[-1].bytes]
    gain = round(100.0 * (top.median - ref.median) / ref.median, 2) if ref.median else None
    losses = [s.bytes for s in sizes if s.high < base_at[s.bytes].low]
    if top.low > ref.high * (1 + min_gain / 100.0):
        if losses:
            return Judged(combo, sizes, "within spread", gain,
                          f"faster at the largest size but slower beyond the spread at "
                          f"{', '.join(str(b) for b in losses)} bytes")
        return Judged(combo, sizes, "better", gain)
    if top.high < ref.low:
        return Judged(combo, sizes, "worse", gain)
    return Judged(combo, sizes, "within spread", gain)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The combination to write into nccl_config, or why there is none."""

    combo: Combo | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The record's form."""
        return {"combo": self.combo.name if self.combo else None,
                "env": dict(self.combo.env) if self.combo else {}, "reason": self.reason}


def recommend(judged: Sequence[Judged], *, backend: str, min_gain: float) -> Recommendation:
    """The best combination judged ``better`` (highest median at the largest size)."""
    if backend != "nccl":
        return Recommendation(None, f"measured with {backend}, which reads no NCCL_* "
                                    "variable: every setting is the same to it")
    better = [j for j in judged if j.verdict == "better"]
    if not better:
        return Recommendation(None, "no setting beats the default by more than the spread "
                                    f"of the runs and {min_gain:g} % at the largest size")
    best = max(better, key=lambda j: j.sizes[-1].median)
    return Recommendation(best.combo, f"{best.combo.name}: {best.gain_pct:+.1f} % busbw at "
                          f"{best.sizes[-1].bytes} bytes, its slowest run above the default's "
                          "fastest")


def judge_all(runs: Mapping[Combo, Sequence[Sequence[SizeResult]]], *,
              min_gain: float, backend: str = "nccl") -> tuple[Judged, ...]:
    """Every combination judged against the default (the first of ``runs``). Under a
    backend other than NCCL no setting had an effect: what the numbers say is kept as a
    note, the verdict says so."""
    spread = {c: spreads(r) for c, r in runs.items()}
    base = next(s for c, s in spread.items() if c.is_default)
    judged = tuple(judge(c, s, base, min_gain=min_gain) for c, s in spread.items())
    if backend == "nccl":
        return judged
    return tuple(j if j.combo.is_default else dataclasses.replace(
        j, verdict=f"not read by {backend}",
        note=f"the runs read {j.verdict}: run-to-run noise, no setting took effect")
        for j in judged)
