"""A rank NCCL's RAS considers dead convicts its node in the fleet's blame, from the
stalled pair alone (without it, a hung pair waits for a second round)."""

from __future__ import annotations

import threading

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective.plan import Options
from nodetune.errors import NodeTimeout
from nodetune.fleet import run as fleet_run
from nodetune.fleet.planner import FleetSpec, Outcome, PairOutcome, PlannedPair, next_round
from nodetune.fleet.verdict import decide
from nodetune.verdicts import NodeState

REASON = "no progress for 60 s; NCCL RAS: dead rank 1 (pid 4711 on 192.0.2.3 GPU 0)"


def test_a_dead_rank_convicts_its_node_in_round_one() -> None:
    spec = FleetSpec(("a", "b", "c", "d"))
    hung = [PairOutcome(("a", "b"), 1, Outcome.TIMEOUT, REASON, dead=("b",)),
            PairOutcome(("c", "d"), 1, Outcome.PASS, busbw_gbps=1.5)]
    v = decide(spec, hung)
    assert v["b"].state is NodeState.BAD
    assert v["b"].reason == f"hung with a, round 1: NCCL's RAS considers a rank on it dead: {REASON}"
    assert v["a"].state is NodeState.UNRESOLVED  # its partner's fault: a is tried again
    assert [p for p in next_round(spec, hung) if "a" in p.hosts]
    # Without RAS's word the same pair convicts no one yet.
    plain = [PairOutcome(("a", "b"), 1, Outcome.TIMEOUT, REASON), hung[1]]
    assert decide(spec, plain)["b"].state is NodeState.UNRESOLVED


def test_a_node_that_passed_is_never_convicted_by_ras() -> None:
    spec = FleetSpec(("a", "b", "c", "d"))
    outcomes = [PairOutcome(("a", "b"), 1, Outcome.TIMEOUT, REASON, dead=("b",)),
                PairOutcome(("b", "c"), 2, Outcome.PASS)]
    assert decide(spec, outcomes)["b"].state is NodeState.GOOD


def test_the_stalled_pairs_ras_section_becomes_the_outcomes_dead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = {n: Host(n, ("gpu_nodes",), {"ansible_host": "192.0.2.1"}) for n in ("a", "b")}

    def stalled(*_a: object, **_k: object) -> None:
        exc = NodeTimeout(REASON, host="b")
        exc.sections = {"ras": {"ok": True, "dead_nodes": ["b", "not-in-this-pair"]}}
        raise exc
    monkeypatch.setattr(fleet_run, "validate_planned", stalled)
    outcome, validation = fleet_run.run_one_pair(PlannedPair(("a", "b"), 1, "round one"), hosts,
                                                 Options(), threading.Event(), lambda _n, _m: None)
    assert validation is None
    assert (outcome.outcome, outcome.dead) == (Outcome.TIMEOUT, ("b",))
