"""One row of an nccl-tests sweep, as validate's pairs, check's one-node all_reduce and tune
measure it, and how a message size is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodetune.measure.jitter import PerIter


@dataclass(frozen=True, slots=True)
class SizeResult:
    """One row of the nccl-tests table."""

    bytes: int
    count: int
    type: str
    time_us: float
    algbw: float
    busbw: float
    wrong: int
    launch: str = "eager"  # "graph": the timed ops were one CUDA graph replay
    rounds: int = 1        # timed rounds of `iters` ops; time_us is their median
    time_us_min: float | None = None   # the fastest and slowest round (mean over ranks)
    time_us_max: float | None = None
    # Every rank's rounds and their statistics, as nccl-tests -I reports them (jitter.py)
    per_iter: PerIter | None = None

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SizeResult:
        """A row as report.json holds it (``asdict``)."""
        rounds = doc.get("per_iter")
        return cls(**{**doc, "per_iter": PerIter.from_dict(rounds) if rounds else None})


def human_bytes(n: int) -> str:
    """1048576 -> '1 MiB'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"
