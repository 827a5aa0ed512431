"""Run the planner against simulated pair outcomes: for tests and the planning benchmark."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from nodetune.fleet.planner import FleetSpec, Outcome, PairOutcome, PlannedPair, next_round
from nodetune.fleet.verdict import decide
from nodetune.verdicts import NodeVerdict

Judge = Callable[[PlannedPair], Outcome]


@dataclass(frozen=True, slots=True)
class Simulation:
    """What a simulated fleet run did and concluded."""

    rounds: int
    pair_tests: int
    outcomes: tuple[PairOutcome, ...]
    verdicts: dict[str, NodeVerdict]


def both_good(bad: Collection[str]) -> Judge:
    """A pair passes exactly when neither node is bad."""
    bad = frozenset(bad)
    return lambda pair: Outcome.FAIL if set(pair.hosts) & bad else Outcome.PASS


def simulate(spec: FleetSpec, judge: Judge) -> Simulation:
    """Plan rounds until the planner has none left, judging each pair with ``judge``."""
    outcomes: list[PairOutcome] = []
    while True:
        pairs = next_round(spec, outcomes)
        if not pairs:
            break
        busy = [h for p in pairs for h in p.hosts]
        if len(busy) != len(set(busy)):
            raise AssertionError(f"round {pairs[0].round} puts a node in two pairs: {pairs}")
        outcomes += [PairOutcome(p.hosts, p.round, judge(p)) for p in pairs]
    return Simulation(rounds=max((o.round for o in outcomes), default=0),
                      pair_tests=len(outcomes), outcomes=tuple(outcomes),
                      verdicts=decide(spec, outcomes))
