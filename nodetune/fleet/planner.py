"""The round planner: which pairs a fleet validation runs next, from the results so far.

A pure function of the nodes and the pair outcomes: no I/O, no clock, no
randomness beyond the seed. Round 1 is a perfect matching (or, with known-good
partners, each repaired node against a partner); every later round pairs each
suspect with a distinct node already proven good that it has not met before.
Two rounds are exact when at most a quarter of the nodes are bad: a failed pair
makes at most two suspects per bad node, and at least as many nodes passed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nodetune.errors import InputError

# Rounds after the first only pair suspects with proven-good nodes, so each one
# decides at least one node; a third round is needed only when round 2 ran out of
# distinct good partners (odd N with 4k = N - 1, or more than a quarter bad).
MAX_ROUNDS = 3
PAIRINGS = ("random", "same", "cross")


class Outcome(Enum):
    """How one pair test ended."""

    PASS = "pass"  # noqa: S105 - correct sums, busbw at or above the threshold, expected transport
    FAIL = "fail"        # ran, and failed a check (bandwidth, wrong values, transport)
    ERROR = "error"      # crashed, could not launch, a worker died
    TIMEOUT = "timeout"  # hung past its timeout and was stopped


@dataclass(frozen=True, slots=True)
class PlannedPair:
    """One pair test to run: ``hosts[0]`` is node rank 0."""

    hosts: tuple[str, str]
    round: int
    why: str = ""


@dataclass(frozen=True, slots=True)
class PairOutcome:
    """One pair test's result, as the verdict and the planner read it."""

    hosts: tuple[str, str]
    round: int
    outcome: Outcome
    reason: str = ""
    busbw_gbps: float | None = None
    unreachable: tuple[str, ...] = ()  # nodes this pair could not reach (not its verdict)
    # --image: each node's container checklist (report.json's ``container``), pass or fail
    container: Mapping[str, Any] = field(default_factory=dict, compare=False)
    image_fault: bool = False  # --image: the image failed (missing, checklist): no node's fault
    dead: tuple[str, ...] = ()  # nodes where NCCL's RAS considers a rank dead (convicted)

    @property
    def passed(self) -> bool:
        """Whether the pair passed."""
        return self.outcome is Outcome.PASS


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """What the planner works from: the nodes to test and how to pair them.

    ``nodes`` are the nodes under test (reachable, with python and torch);
    ``partners`` the operator's known-good nodes (``--partners``), disjoint from
    ``nodes``; ``keys`` each node's value of the ``--pairing-key`` variable.
    """

    nodes: tuple[str, ...]
    partners: tuple[str, ...] = ()
    pairing: str = "random"
    keys: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    max_rounds: int = MAX_ROUNDS

    def check(self) -> None:
        """Raises InputError on a spec no plan can use."""
        if self.pairing not in PAIRINGS:
            raise InputError(f"--pairing {self.pairing!r}: choose one of {', '.join(PAIRINGS)}")
        if len(set(self.nodes)) != len(self.nodes):
            raise InputError("a node is selected twice")
        both = sorted(set(self.nodes) & set(self.partners))
        if both:
            raise InputError(f"{', '.join(both)}: both under test and a --partners node")
        if self.pairing != "random" and not self.partners:
            missing = [n for n in self.nodes if n not in self.keys]
            if missing:
                raise InputError(f"{', '.join(missing)}: no value for the --pairing-key variable")


@dataclass(frozen=True, slots=True)
class Knowledge:
    """What the outcomes so far prove about each node."""

    good: frozenset[str]              # passed with someone: never blamed
    unreachable: frozenset[str]       # a pair could not reach it (and it never passed)
    bad: Mapping[str, PairOutcome]    # node -> the failed pair that convicts it
    suspect_partners: Mapping[str, tuple[str, ...]]  # partner -> nodes it failed with
    met: Mapping[str, frozenset[str]]  # node -> every node it was paired with

    def trusted(self, node: str, partners: Iterable[str]) -> bool:
        """Proven good, or a known-good partner not (yet) suspect."""
        return node in self.good or (node in set(partners) and node not in self.suspect_partners)


def learn(spec: FleetSpec, outcomes: Sequence[PairOutcome]) -> Knowledge:
    """Everything the outcomes prove, assuming a pair passes exactly when both nodes are good.

    - Both nodes of a passing pair are good; a good node is never blamed.
    - A node that failed with a trusted partner (proven good, or a known-good
      partner) is bad.
    - A node where NCCL's RAS found a rank of a hung pair dead is bad.
    - A known-good partner that failed with two different nodes is a suspect
      partner: it no longer convicts anyone, and what it alone convicted is
      open again.
    """
    met: dict[str, set[str]] = {}
    for o in outcomes:
        a, b = o.hosts
        met.setdefault(a, set()).add(b)
        met.setdefault(b, set()).add(a)
    good = frozenset(h for o in outcomes if o.passed for h in o.hosts)
    down = frozenset(h for o in outcomes for h in o.unreachable) - good
    partners = set(spec.partners)
    failed_with: dict[str, list[str]] = {}
    for o in outcomes:
        if o.passed:
            continue
        for p, other in (o.hosts, o.hosts[::-1]):
            if p in partners and p not in good and other not in failed_with.get(p, []):
                failed_with.setdefault(p, []).append(other)
    suspects = {p: tuple(w) for p, w in failed_with.items() if len(w) >= 2}
    bad: dict[str, PairOutcome] = {}
    # The latest round first: that is the test planned to decide the node.
    for o in sorted(outcomes, key=lambda o: -o.round):
        # a pair that never reached a node, or whose image failed, convicts no one
        if o.passed or o.unreachable or o.image_fault:
            continue
        for node, other in (o.hosts, o.hosts[::-1]):
            if node in good or node in bad:
                continue
            # a rank NCCL's RAS considers dead convicts its node, as a good partner would
            if node in o.dead or other in good or (other in partners and other not in suspects):
                bad[node] = o
    return Knowledge(good=good, unreachable=down, bad=bad, suspect_partners=suspects,
                     met={k: frozenset(v) for k, v in met.items()})


def undecided(spec: FleetSpec, knowledge: Knowledge) -> tuple[str, ...]:
    """Nodes under test (and suspect partners) that are neither proven good nor bad."""
    pool = (*spec.nodes, *knowledge.suspect_partners)
    return tuple(n for n in pool if n not in knowledge.good and n not in knowledge.bad
                 and n not in knowledge.unreachable)


def first_round(spec: FleetSpec) -> tuple[PlannedPair, ...]:
    """Round 1: a perfect matching of the nodes, or each repaired node with a partner.

    Raises:
        InputError: the spec is unusable (see ``FleetSpec.check``).
    """
    spec.check()
    if spec.partners:
        return _partner_round(spec, learn(spec, ()), (), 1)
    rng = random.Random(spec.seed)  # noqa: S311 - a repeatable pairing, not a secret
    nodes = list(spec.nodes)
    if spec.pairing == "random":
        rng.shuffle(nodes)
        pairs = [(nodes[i], nodes[i + 1], "random matching") for i in range(0, len(nodes) - 1, 2)]
    else:
        pairs = _keyed_matching(nodes, spec.keys, same=spec.pairing == "same", rng=rng)
    return tuple(PlannedPair((a, b), 1, why) for a, b, why in pairs)


def next_round(spec: FleetSpec, outcomes: Sequence[PairOutcome]) -> tuple[PlannedPair, ...]:
    """The pairs of the next round, or ``()`` when every node is decided or none can be.

    Each undecided node meets a distinct trusted node it has not met before (so
    never its round-1 partner); no node is in two pairs of one round.
    """
    rounds = max((o.round for o in outcomes), default=0)
    if rounds == 0:
        return first_round(spec)
    if rounds >= round_limit(spec):
        return ()
    knowledge = learn(spec, outcomes)
    if spec.partners:
        return _partner_round(spec, knowledge, outcomes, rounds + 1)
    suspects = _by_priority(undecided(spec, knowledge), outcomes, knowledge)
    good = sorted(knowledge.good)
    random.Random(spec.seed * 1_000_003 + rounds).shuffle(good)  # noqa: S311
    if spec.pairing != "random":
        # Prefer a partner on the same path round 1 tested (same or another rack).
        def prefer(s: str, g: str) -> bool:
            same = spec.keys.get(s) == spec.keys.get(g)
            return same if spec.pairing == "same" else not same
        candidates = {s: sorted(good, key=lambda g: not prefer(s, g)) for s in suspects}
    else:
        candidates = {s: good for s in suspects}
    match = _bipartite(suspects, candidates, knowledge.met)
    return tuple(PlannedPair((s, match[s]), rounds + 1, "suspect with a node that passed")
                 for s in suspects if s in match)


def round_limit(spec: FleetSpec) -> int:
    """``max_rounds``, plus the rounds partners need to meet every repaired node once."""
    if not spec.partners:
        return spec.max_rounds
    return spec.max_rounds - 1 + -(-len(spec.nodes) // len(spec.partners))


def serial_tests(spec: FleetSpec, parallel: int | None) -> int:
    """The most pair tests that run one after another: every round the fleet may take
    (:func:`round_limit`, at least ``MAX_ROUNDS``), each of ``ceil(pairs / parallel)``
    turns (every node under test and partner in pairs). The launcher's time budget is
    this many single tests (:func:`~nodetune.validate.launcher.run_seconds`)."""
    pairs = -(-(len(spec.nodes) + len(spec.partners)) // 2)
    return max(round_limit(spec), MAX_ROUNDS) * -(-pairs // (parallel or pairs))


def _partner_round(spec: FleetSpec, knowledge: Knowledge, outcomes: Sequence[PairOutcome],
                   number: int) -> tuple[PlannedPair, ...]:
    """Each open repaired node with a distinct trusted partner it has not met.

    Open: never tested, or convicted only by a partner that turned suspect.
    """
    open_nodes = [n for n in undecided(spec, knowledge) if n in spec.nodes]
    trusted = [p for p in spec.partners if knowledge.trusted(p, spec.partners)
               and p not in knowledge.unreachable]
    trusted += sorted(n for n in knowledge.good if n not in spec.partners)
    order = list(trusted)
    random.Random(spec.seed + number).shuffle(order)  # noqa: S311
    # Proven partners first: they convict for certain.
    order.sort(key=lambda p: p not in knowledge.good)
    match = _bipartite(open_nodes, {n: order for n in open_nodes}, knowledge.met)
    why = "repaired node with a known-good partner" if number == 1 else "retest with a partner"
    return tuple(PlannedPair((n, match[n]), number, why) for n in open_nodes if n in match)


def _by_priority(suspects: Sequence[str], outcomes: Sequence[PairOutcome],
                 knowledge: Knowledge) -> list[str]:
    """One node of each failed pair first (if it is good, its partner is bad), then the rest."""
    first: list[str] = []
    rest: list[str] = []
    seen: set[str] = set()
    for o in sorted(outcomes, key=lambda o: (o.round, o.hosts)):
        if o.passed:
            continue
        a, b = o.hosts
        for node, other in ((a, b), (b, a)):
            if node in suspects and node not in seen:
                seen.add(node)
                (rest if other in first else first).append(node)
    rest += [s for s in suspects if s not in seen]  # odd nodes out, never tested
    # Never-tested nodes (odd ones out) go before second members of failed pairs.
    untested = [s for s in rest if s not in knowledge.met]
    return first + untested + [s for s in rest if s in knowledge.met]


def _bipartite(left: Sequence[str], candidates: Mapping[str, Sequence[str]],
               met: Mapping[str, frozenset[str]]) -> dict[str, str]:
    """A maximum matching of ``left`` onto distinct candidates they have not met, in order.

    Kuhn's augmenting paths; the candidate order is each node's preference.
    """
    owner: dict[str, str] = {}

    def place(node: str, visited: set[str]) -> bool:
        for cand in candidates.get(node, ()):
            if cand in visited or cand == node or cand in met.get(node, frozenset()):
                continue
            visited.add(cand)
            if cand not in owner or place(owner[cand], visited):
                owner[cand] = node
                return True
        return False

    for node in left:
        place(node, set())
    return {node: cand for cand, node in owner.items()}


def _keyed_matching(nodes: list[str], keys: Mapping[str, str], *, same: bool,
                    rng: random.Random) -> list[tuple[str, str, str]]:
    """Pairs within one key value (``same``) or across values; leftovers paired as they can."""
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(keys[n], []).append(n)
    for members in groups.values():
        rng.shuffle(members)
    pairs: list[tuple[str, str, str]] = []
    left: list[str] = []
    if same:
        for value in sorted(groups):
            members = groups[value]
            pairs += [(members[i], members[i + 1], f"same {value}")
                      for i in range(0, len(members) - 1, 2)]
            left += members[len(members) - len(members) % 2:]
    else:
        pools = {v: list(m) for v, m in groups.items()}
        while True:
            ranked = sorted((v for v in pools if pools[v]), key=lambda v: (-len(pools[v]), v))
            if len(ranked) < 2:
                break
            a, b = pools[ranked[0]].pop(), pools[ranked[1]].pop()
            pairs.append((a, b, f"across {ranked[0]} / {ranked[1]}"))
        left = [n for m in pools.values() for n in m]
    rng.shuffle(left)
    pairs += [(left[i], left[i + 1], "leftover (no pair of the asked kind)")
              for i in range(0, len(left) - 1, 2)]
    return pairs
