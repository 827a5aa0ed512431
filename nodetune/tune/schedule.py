"""The order of ``tune``'s runs: round-robin over the combinations, repeated, so that a
drift of the fabric or the nodes over the run (a neighbour's job, a warming NIC) falls on
every combination alike instead of picking the winner."""

from __future__ import annotations

from dataclasses import dataclass

MIN_REPEATS = 2   # one run of each has no spread to judge a difference by


@dataclass(frozen=True, slots=True)
class Slot:
    """One run: which repeat, and which combination (its index in the grid)."""

    repeat: int
    combo: int


def interleaved(combos: int, repeats: int) -> tuple[Slot, ...]:
    """Every combination once per round, ``repeats`` rounds; round ``r`` starts at
    combination ``r mod combos``, so that none is always first (a cold start) or always
    right after the same neighbour."""
    if combos < 1 or repeats < 1:
        raise ValueError("at least one combination and one repeat")
    return tuple(Slot(r, (r + i) % combos) for r in range(repeats) for i in range(combos))
