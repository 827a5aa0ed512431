"""The round planner and fleet verdicts on simulated outcomes: no SSH, no lab."""

from __future__ import annotations

import itertools
import random

import pytest

from nodetune.errors import ExitCode, InputError
from nodetune.fleet.planner import (
    FleetSpec,
    Outcome,
    PairOutcome,
    first_round,
    next_round,
)
from nodetune.fleet.simulate import both_good, simulate
from nodetune.fleet.verdict import decide, exit_code
from nodetune.verdicts import NodeState, NodeVerdict


def names(n: int) -> tuple[str, ...]:
    return tuple(f"n{i:03d}" for i in range(n))


def states(verdicts: dict[str, NodeVerdict]) -> dict[str, str]:
    return {k: v.state.value for k, v in verdicts.items()}


def assert_exact(spec: FleetSpec, bad: set[str]) -> None:
    sim = simulate(spec, both_good(bad))
    want = {n: "bad" if n in bad else "good" for n in spec.nodes}
    assert states(sim.verdicts) == want, sim.outcomes


# --- round 1 -----------------------------------------------------------------------------------

def test_round_one_is_a_perfect_matching_repeatable_by_seed() -> None:
    spec = FleetSpec(names(10), seed=7)
    pairs = first_round(spec)
    hosts = [h for p in pairs for h in p.hosts]
    assert sorted(hosts) == sorted(spec.nodes)
    assert {p.round for p in pairs} == {1}
    assert first_round(spec) == pairs
    assert first_round(FleetSpec(names(10), seed=8)) != pairs


def test_odd_n_leaves_one_node_out_of_round_one_and_tests_it_in_round_two() -> None:
    spec = FleetSpec(names(7), seed=1)
    pairs = first_round(spec)
    assert len(pairs) == 3
    odd = (set(spec.nodes) - {h for p in pairs for h in p.hosts}).pop()
    sim = simulate(spec, both_good(set()))
    assert sim.rounds == 2 and sim.pair_tests == 4
    assert all(v.state is NodeState.GOOD for v in sim.verdicts.values())
    assert "passed with" in sim.verdicts[odd].reason and sim.verdicts[odd].partners


def test_pairing_same_keeps_pairs_inside_a_rack_and_cross_spans_racks() -> None:
    nodes = names(8)
    keys = {n: f"rack{i % 2}" for i, n in enumerate(nodes)}
    same = first_round(FleetSpec(nodes, pairing="same", keys=keys, seed=3))
    assert all(keys[a] == keys[b] for a, b in (p.hosts for p in same))
    cross = first_round(FleetSpec(nodes, pairing="cross", keys=keys, seed=3))
    assert all(keys[a] != keys[b] for a, b in (p.hosts for p in cross))
    assert len(same) == len(cross) == 4


def test_pairing_same_pairs_odd_racks_leftovers_together() -> None:
    nodes = names(6)
    keys = dict(zip(nodes, ["a", "a", "a", "b", "b", "b"], strict=True))
    pairs = first_round(FleetSpec(nodes, pairing="same", keys=keys))
    assert len(pairs) == 3
    assert sum(keys[p.hosts[0]] != keys[p.hosts[1]] for p in pairs) == 1
    assert any("leftover" in p.why for p in pairs)


def test_pairing_key_missing_on_a_node_names_it() -> None:
    nodes = names(4)
    with pytest.raises(InputError, match="n003"):
        first_round(FleetSpec(nodes, pairing="cross", keys={n: "r" for n in nodes[:3]}))


def test_bad_spec_is_input_error() -> None:
    with pytest.raises(InputError, match="--pairing"):
        first_round(FleetSpec(names(4), pairing="bogus"))
    with pytest.raises(InputError, match="n001"):
        first_round(FleetSpec(names(4), partners=("n001",)))


# --- round 2 and verdicts -----------------------------------------------------------------------

def test_round_two_pairs_each_suspect_with_a_distinct_good_node_never_its_partner() -> None:
    spec = FleetSpec(names(8), seed=5)
    r1 = first_round(spec)
    bad_pair = r1[0].hosts
    outcomes = [PairOutcome(p.hosts, 1, Outcome.FAIL if p.hosts == bad_pair else Outcome.PASS)
                for p in r1]
    r2 = next_round(spec, outcomes)
    assert {p.round for p in r2} == {2}
    assert sorted(p.hosts[0] for p in r2) == sorted(bad_pair)
    partners = [p.hosts[1] for p in r2]
    assert len(set(partners)) == 2 and not set(partners) & set(bad_pair)


def test_one_slow_node_is_bad_its_round_one_partner_good_in_two_rounds() -> None:
    spec = FleetSpec(names(4), seed=0)
    slow = "n002"
    sim = simulate(spec, both_good({slow}))
    assert sim.rounds == 2 and sim.pair_tests == 4  # N/2 + 2k
    v = sim.verdicts
    assert v[slow].state is NodeState.BAD
    assert "good" in v[slow].reason and len(v[slow].partners) == 2
    assert [n for n, s in states(v).items() if s != "good"] == [slow]
    assert exit_code(v, sim.outcomes) is ExitCode.CHECK_FAILED


def test_all_bad_nodes_are_unresolved_never_blamed_without_a_good_partner() -> None:
    spec = FleetSpec(names(6), seed=2)
    sim = simulate(spec, both_good(set(spec.nodes)))
    assert sim.rounds == 1 and sim.pair_tests == 3
    assert set(states(sim.verdicts).values()) == {"unresolved"}
    assert all("no good partner" in v.reason for v in sim.verdicts.values())
    assert exit_code(sim.verdicts, sim.outcomes) is ExitCode.CHECK_FAILED


def test_a_passing_node_is_never_blamed_even_after_a_later_failure() -> None:
    spec = FleetSpec(("a", "b", "c", "d"))
    outcomes = [PairOutcome(("a", "b"), 1, Outcome.PASS), PairOutcome(("c", "d"), 1, Outcome.FAIL),
                PairOutcome(("c", "a"), 2, Outcome.FAIL), PairOutcome(("d", "b"), 2, Outcome.FAIL)]
    v = decide(spec, outcomes)
    assert v["a"].state is v["b"].state is NodeState.GOOD
    assert "put down to c" in v["a"].reason
    assert v["c"].state is v["d"].state is NodeState.BAD


def test_hung_pair_decided_by_round_two_and_exit_codes() -> None:
    spec = FleetSpec(("a", "b", "c", "d"))
    hung = [PairOutcome(("a", "b"), 1, Outcome.TIMEOUT, "no progress for 60 s"),
            PairOutcome(("c", "d"), 1, Outcome.PASS, busbw_gbps=1.5)]
    assert [p.hosts for p in next_round(spec, hung)] in (
        [("a", "c"), ("b", "d")], [("a", "d"), ("b", "c")])
    r2 = [PairOutcome(("a", "c"), 2, Outcome.TIMEOUT), PairOutcome(("b", "d"), 2, Outcome.PASS)]
    v = decide(spec, hung + r2)
    assert v["a"].state is NodeState.BAD and "hung with c" in v["a"].reason
    assert exit_code(v, hung + r2) is ExitCode.CHECK_FAILED
    # Both pass in round 2: nobody to blame, but a pair hung: exit 4.
    r2ok = [PairOutcome(("a", "c"), 2, Outcome.PASS), PairOutcome(("b", "d"), 2, Outcome.PASS)]
    v = decide(spec, hung + r2ok)
    assert set(states(v).values()) == {"good"}
    assert exit_code(v, hung + r2ok) is ExitCode.TIMEOUT
    assert exit_code(decide(spec, hung), hung) is ExitCode.TIMEOUT


def test_unreachable_at_preflight_is_not_paired_and_gives_exit_3() -> None:
    pre = {"d": NodeVerdict("d", NodeState.UNREACHABLE, "ssh: connection refused")}
    spec = FleetSpec(("a", "b", "c"))
    sim = simulate(spec, both_good(set()))
    assert all("d" not in o.hosts for o in sim.outcomes)
    v = decide(spec, sim.outcomes, preflight=pre)
    assert states(v) == {"a": "good", "b": "good", "c": "good", "d": "unreachable"}
    assert exit_code(v, sim.outcomes) is ExitCode.INFRASTRUCTURE
    bad = dict(v, e=NodeVerdict("e", NodeState.BAD, "no torch"))
    assert exit_code(bad, sim.outcomes) is ExitCode.CHECK_FAILED


def test_two_nodes_one_bad_cannot_be_told_apart() -> None:
    sim = simulate(FleetSpec(("a", "b")), both_good({"a"}))
    assert states(sim.verdicts) == {"a": "unresolved", "b": "unresolved"}


def test_single_node_is_unresolved_without_a_partner() -> None:
    sim = simulate(FleetSpec(("a",)), both_good(set()))
    assert sim.pair_tests == 0
    assert sim.verdicts["a"].state is NodeState.UNRESOLVED


# --- --partners ---------------------------------------------------------------------------------

def test_partners_each_repaired_node_meets_a_partner_in_round_one() -> None:
    spec = FleetSpec(("r1", "r2"), partners=("p1", "p2", "p3"), seed=4)
    pairs = first_round(spec)
    assert sorted(p.hosts[0] for p in pairs) == ["r1", "r2"]
    assert all(p.hosts[1].startswith("p") for p in pairs)
    assert len({p.hosts[1] for p in pairs}) == 2


def test_partners_bad_repaired_node_named_in_one_round() -> None:
    spec = FleetSpec(("r1", "r2"), partners=("p1", "p2"))
    sim = simulate(spec, both_good({"r2"}))
    assert sim.rounds == 1 and sim.pair_tests == 2
    v = sim.verdicts
    assert v["r2"].state is NodeState.BAD and "known-good partner" in v["r2"].reason
    assert v["r1"].state is NodeState.GOOD
    used = {p for p in ("p1", "p2") if p in v}
    assert used == {"p1", "p2"}
    bad_partner = v["r2"].partners[0]
    assert v[bad_partner].state is NodeState.GOOD and "which is blamed" in v[bad_partner].reason


def test_more_repaired_nodes_than_partners_take_more_rounds_never_overlap() -> None:
    spec = FleetSpec(tuple(f"r{i}" for i in range(5)), partners=("p1", "p2"))
    sim = simulate(spec, both_good({"r3"}))
    assert states(sim.verdicts)["r3"] == "bad"
    assert {n: s for n, s in states(sim.verdicts).items() if n != "r3"} == {
        n: "good" for n in sim.verdicts if n != "r3"}


def test_partner_failing_with_two_repaired_nodes_is_a_suspect_partner() -> None:
    spec = FleetSpec(("r1", "r2", "r3"), partners=("p1",))
    # p1 is the bad one; the repaired nodes are fine.
    sim = simulate(spec, both_good({"p1"}))
    v = sim.verdicts
    assert v["p1"].state is NodeState.UNRESOLVED
    assert v["p1"].reason == "suspect partner: failed with r1 and r2, different nodes under test"
    assert "busy or suspect" in v["r3"].reason
    # Nobody is convicted by a suspect partner alone.
    assert all(v[r].state is not NodeState.BAD for r in ("r1", "r2", "r3"))


def test_suspect_partner_becomes_bad_once_a_repaired_node_is_proven_good() -> None:
    spec = FleetSpec(("r1", "r2", "r3"), partners=("p1", "p2"))
    outcomes = [PairOutcome(("r1", "p1"), 1, Outcome.FAIL), PairOutcome(("r2", "p2"), 1,
                                                                        Outcome.PASS)]
    r2 = next_round(spec, outcomes)
    # The untested node meets the partner that passed; p1, suspect now, is not used.
    assert [p.hosts for p in r2] == [("r3", "p2")]
    outcomes += [PairOutcome(("r3", "p2"), 2, Outcome.PASS)]
    v = decide(spec, outcomes)
    assert v["r1"].state is NodeState.BAD  # one failure with a presumed-good partner


# --- properties over simulated fleets -----------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 11))
def test_exhaustive_small_fleets_exact_and_never_blame_good(n: int) -> None:
    """Every bad set of every size, for N = 2..10, a few seeds each."""
    nodes = names(n)
    for k in range(n + 1):
        for bad in itertools.combinations(nodes, k):
            for seed in (0, 1):
                spec = FleetSpec(nodes, seed=seed)
                sim = simulate(spec, both_good(set(bad)))
                _check(spec, set(bad), sim)


def _check(spec: FleetSpec, bad: set[str], sim: object) -> None:
    from nodetune.fleet.simulate import Simulation

    assert isinstance(sim, Simulation)
    n, k = len(spec.nodes), len(bad)
    v = sim.verdicts
    # Never a good node blamed, never a bad node called good.
    assert all(v[x].state is not NodeState.BAD for x in spec.nodes if x not in bad)
    assert all(v[x].state is not NodeState.GOOD for x in bad)
    if 4 * k <= n and n - k >= 2:
        assert {x for x in spec.nodes if v[x].state is NodeState.BAD} == bad, sim.outcomes
        assert all(v[x].state is NodeState.GOOD for x in spec.nodes if x not in bad)
        assert sim.pair_tests <= -(-n // 2) + 2 * k
        if n % 2 == 0 or n >= 4 * k + 3:
            assert sim.rounds <= 2 and sim.pair_tests <= n // 2 + 2 * k + n % 2
        else:
            assert sim.rounds <= 3


def test_sampled_fleets_up_to_512_nodes() -> None:
    rng = random.Random(13)
    for n in [*range(11, 40), 63, 64, 65, 128, 255, 256, 512]:
        nodes = names(n)
        for k in sorted({0, 1, 2, n // 8, n // 4, n // 4 + 1, n // 2}):
            for _ in range(3):
                bad = set(rng.sample(nodes, k))
                spec = FleetSpec(nodes, seed=rng.randrange(1 << 30))
                _check(spec, bad, simulate(spec, both_good(bad)))


def test_more_than_a_quarter_bad_uses_a_third_round_and_stays_sound() -> None:
    nodes = names(8)
    spec = FleetSpec(nodes, seed=0)
    r1 = first_round(spec)
    # Three bad nodes, one in each of three pairs: six suspects, two good.
    bad = {p.hosts[0] for p in r1[:3]}
    sim = simulate(spec, both_good(bad))
    assert sim.rounds == 3
    v = sim.verdicts
    assert all(v[x].state is not NodeState.BAD for x in nodes if x not in bad)
    found = {x for x in nodes if v[x].state is NodeState.BAD}
    assert found and found <= bad
    assert all(v[x].state is NodeState.UNRESOLVED for x in bad - found)
    assert all("no good partner" in v[x].reason for x in bad - found)


def test_a_node_a_pair_could_not_reach_is_unreachable_and_its_partner_retested() -> None:
    spec = FleetSpec(("a", "b", "c", "d"))
    r1 = [PairOutcome(("a", "b"), 1, Outcome.ERROR, "b: cannot reach root@b:22",
                      unreachable=("b",)),
          PairOutcome(("c", "d"), 1, Outcome.PASS)]
    r2 = next_round(spec, r1)
    assert [p.hosts[0] for p in r2] == ["a"]  # b is not retested, a is
    v = decide(spec, [*r1, PairOutcome(r2[0].hosts, 2, Outcome.PASS)])
    assert states(v) == {"a": "good", "b": "unreachable", "c": "good", "d": "good"}
    assert "cannot reach" in v["b"].reason
    assert exit_code(v, r1) is ExitCode.INFRASTRUCTURE


def test_a_partners_bad_master_address_is_refused_before_any_node() -> None:
    from pathlib import Path

    from nodetune.ansible.inventory import Host, Inventory
    from nodetune.fleet.run import FleetOptions, make_plan

    def inv(*hosts: Host) -> Inventory:
        return Inventory(source=Path("hosts.yml"), hosts=hosts, groups=("gpu_nodes",))

    nodes = [Host(n, ("gpu_nodes",), {"ansible_host": "10.0.0.1"}) for n in ("a", "b")]
    good = Host("p", ("gpu_nodes",), {"ansible_host": "10.0.0.2"})
    assert make_plan(inv(*nodes, good), FleetOptions(seed=1),
                     partners=inv(good)).spec.partners == ("p",)
    bad = Host("p", ("gpu_nodes",), {"ansible_host": "10.0.0.2",
                                     "nodetune_validate_master_addr": "10.0.0.300"})
    with pytest.raises(InputError, match="nodetune_validate_master_addr") as raised:
        make_plan(inv(*nodes, bad), FleetOptions(seed=1), partners=inv(bad))
    assert raised.value.host == "p"


def test_a_pair_failed_by_its_image_convicts_no_one_and_slurm_leaves_its_nodes() -> None:
    """validate --image on a fleet: (a,b) pass; (c,d) and then (a,d) fail because the image
    is missing on d. Without the image rule, d would be bad (it failed beside good a); the
    image's fault says nothing of the node, so d stays unresolved and Slurm leaves it alone,
    even under --drain-unreachable. A node's own failure still convicts it."""
    from nodetune.fleet.verdict import image_held

    spec = FleetSpec(nodes=("a", "b", "c", "d"))
    missing = "no image nvcr.io/nvidia/pytorch:25.10-py3 on d"
    outcomes = [PairOutcome(("a", "b"), 1, Outcome.PASS),
                PairOutcome(("c", "d"), 1, Outcome.ERROR, missing, image_fault=True),
                PairOutcome(("a", "d"), 2, Outcome.ERROR, missing, image_fault=True)]
    verdicts = decide(spec, outcomes)
    assert states(verdicts) == {"a": "good", "b": "good", "c": "unresolved",
                                "d": "unresolved"}
    held = image_held(verdicts, outcomes)
    assert set(held) == {"c", "d"} and all(missing in why for why in held.values())
    own = [*outcomes[:2], PairOutcome(("a", "d"), 2, Outcome.FAIL, "busbw below the mark")]
    assert states(decide(spec, own))["d"] == "bad"
