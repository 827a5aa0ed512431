"""Whether NCCL used a combination's settings, from its own measured runs.

Every run ``tune`` makes logs NCCL's ``INIT,ENV`` lines (validate's worker sets
``NCCL_DEBUG_SUBSYS``), so the runs a combination was measured with are themselves the
proof: :mod:`nodetune.measure.nccl_effective` reads, per node, the value NCCL reports for
each of the combination's variables and where it came from. No extra run is needed, and
the proof covers every repeat, not one. A value NCCL did not use (an environment that
wins, a value NCCL refused and replaced by its default) is a problem: the combination's
numbers measured something else, so it is never recommended. A value NCCL does not log
reading is unconfirmed, said beside the recommendation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodetune.measure import nccl_effective
from nodetune.tune.grid import Combo

WHERE = "tune's setting under test"


@dataclass(frozen=True, slots=True)
class Proof:
    """What NCCL's logs say of one combination's values over its runs."""

    used: tuple[str, ...] = ()         # "node: NCCL_X=V", confirmed in every run
    problems: tuple[str, ...] = ()     # "node: NCCL_X=V (...): NCCL used ..."
    unconfirmed: tuple[str, ...] = ()  # "node: NCCL_X=V": NCCL did not log reading it
    unassessed: tuple[str, ...] = ()   # "node: why" (no ENV lines: nothing proven)

    @property
    def ignored(self) -> bool:
        """NCCL did not use one of the values in some run."""
        return bool(self.problems)

    @property
    def proven(self) -> bool:
        """Every value NCCL reported using, on every node of every run."""
        return bool(self.used) and not (self.problems or self.unconfirmed or self.unassessed)

    def summary(self) -> str:
        """One line for the recommendation and the record."""
        if self.problems:
            return "NCCL did not use it: " + "; ".join(self.problems)
        if self.proven:
            return "NCCL's log shows it used: " + ", ".join(self.used)
        parts = []
        if self.unconfirmed:
            parts.append("NCCL did not log reading " + ", ".join(self.unconfirmed))
        if self.unassessed:
            parts.append("not assessed: " + "; ".join(self.unassessed))
        return "not proven: " + "; ".join(parts) if parts else ""

    def to_dict(self) -> dict[str, Any]:
        """The record's ``judged[].nccl_used``."""
        return {"ignored": self.ignored, "proven": self.proven, "used": list(self.used),
                "problems": list(self.problems), "unconfirmed": list(self.unconfirmed),
                "unassessed": list(self.unassessed)}


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def prove(combo: Combo, runs: Sequence[tuple[Mapping[str, Sequence[str]],
                                             Mapping[str, Mapping[str, str]]]]) -> Proof:
    """``combo``'s values against what NCCL reported in each of its runs. ``runs``: per run,
    each node's worker lines and the environment nodetune gave its ranks (a
    :class:`~nodetune.collective.launch.Measurement`'s ``logs`` and ``launch.env``)."""
    if combo.is_default or not runs:
        return Proof()
    expected = [nccl_effective.Expected(k, v, WHERE) for k, v in combo.env]
    used: list[str] = []
    problems: list[str] = []
    unconfirmed: list[str] = []
    unassessed: list[str] = []
    for logs, env in runs:
        for node, lines in logs.items():
            eff = nccl_effective.node_effective(node, lines, run_env=env.get(node, {}))
            verdict = nccl_effective.judge(eff, expected)
            used += (f"{node}: {u}" for u in verdict.used)
            problems += (f"{node}: {p}" for p in verdict.problems)
            unconfirmed += (f"{node}: {u}" for u in verdict.unconfirmed)
            if verdict.unassessed:
                unassessed.append(f"{node}: {verdict.unassessed}")
    confirmed = [u for u in _unique(used) if u not in set(unconfirmed)]
    return Proof(tuple(confirmed), _unique(problems), _unique(unconfirmed),
                 _unique(unassessed))
