"""Threshold profiles and the order in which a threshold is chosen."""

from __future__ import annotations

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective.plan import Options, Pair, plan_pair
from nodetune.errors import InputError
from nodetune.measure import thresholds
from nodetune.measure.sweep import SizeResult
from nodetune.validate.result import PairResult, Transport, Verdict, node_marks


def test_every_profile_names_source_and_algorithm() -> None:
    assert thresholds.PROFILES
    for p in thresholds.PROFILES.values():
        assert p.source and p.min_busbw_gbps > 0 and p.at_bytes > 0
        assert p.algorithm in ("ring", "nccl-default", "gloo")
        assert p.backend in ("nccl", "gloo")


def test_margin_profiles_derive_from_reference() -> None:
    assert thresholds.profile_named("h100-2node-aws-p5").min_busbw_gbps == pytest.approx(0.9 * 437, abs=0.1)
    assert thresholds.profile_named("h100-ring-multinode").forces_ring
    assert not thresholds.profile_named("h100-2node-oci").forces_ring


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(InputError, match="h100-2node-oci"):
        thresholds.profile_named("nope")


def test_cli_wins_over_inventory_and_profile() -> None:
    th = thresholds.resolve(cli_min=5.0, inventory_min="7", profile="lab-gloo")
    assert th is not None and th.min_busbw_gbps == 5.0 and th.origin == "--min-busbw"
    assert th.profile is thresholds.profile_named("lab-gloo")


def test_inventory_wins_over_profile() -> None:
    th = thresholds.resolve(cli_min=None, inventory_min="7.5", profile="lab-gloo")
    assert th is not None and th.min_busbw_gbps == 7.5
    assert "inventory" in th.origin


def test_profile_alone_and_nothing() -> None:
    th = thresholds.resolve(cli_min=None, inventory_min=None, profile="lab-gloo")
    assert th is not None and th.origin == "profile lab-gloo"
    assert thresholds.resolve(cli_min=None, inventory_min="", profile=None) is None


@pytest.mark.parametrize(("cli", "inv"), [(-1.0, None), (None, "fast"), (None, "-3")])
def test_bad_thresholds_are_input_errors(cli: float | None, inv: object) -> None:
    with pytest.raises(InputError):
        thresholds.resolve(cli_min=cli, inventory_min=inv, profile=None)


# -- a pair's pass mark: the stricter of its nodes', not node rank 0's --------------------

def _host(name: str, **vars_: object) -> Host:
    return Host(name=name, groups=("gpu_nodes",), vars={"ansible_host": "192.0.2.1", **vars_})


@pytest.mark.parametrize("swap", [False, True])
def test_a_pairs_pass_mark_is_the_stricter_of_its_two_nodes(swap: bool) -> None:
    slow = _host("a", nodetune_validate_min_busbw_gbps=10)
    fast = _host("b", nodetune_validate_min_busbw_gbps=40, nodetune_validate_expect_transport="ib")
    pair = Pair(fast, slow) if swap else Pair(slow, fast)
    planned = plan_pair(pair, Options())
    assert planned.threshold is not None and planned.threshold.min_busbw_gbps == 40
    assert planned.expect_transport == "ib"
    # A profile that assumes NCCL's ring on either node forces it for the pair.
    ring = _host("c", nodetune_validate_profile="h100-ring-multinode")
    assert plan_pair(Pair(slow, ring) if swap else Pair(ring, slow), Options()).force_ring
    # The options still decide for both.
    assert plan_pair(pair, Options(min_busbw=5.0)).threshold.min_busbw_gbps == 5.0  # type: ignore[union-attr]


def test_a_pair_whose_nodes_expect_different_transports_is_refused() -> None:
    a = _host("a", nodetune_validate_expect_transport="ib")
    b = _host("b", nodetune_validate_expect_transport="socket")
    with pytest.raises(InputError, match="a expects ib and b expects socket"):
        plan_pair(Pair(a, b), Options())
    with pytest.raises(InputError, match="not a number") as err:
        plan_pair(Pair(a, _host("b", nodetune_validate_min_busbw_gbps="fast")), Options())
    assert err.value.host == "b"


def _result(hosts: tuple[str, str], passed: bool, gbps: float | None, *, at: int = 4 << 20,
            ring: bool = False) -> PairResult:
    transport = Transport(backend="nccl", kind="IB", algorithm="Ring" if ring else None,
                          algorithm_source="NCCL_ALGO=Ring" if ring else "not logged")
    row = SizeResult(bytes=at, count=at // 4, type="float", time_us=1.0, algbw=1.0, busbw=1.0,
                     wrong=0)
    return PairResult(hosts=hosts, backend="nccl", nproc_per_node=1, world=2, sizes=(row,),
                      transport=transport, verdict=Verdict.PASS if passed else Verdict.FAIL,
                      reasons=(), expect_transport="ib",
                      threshold=thresholds.Threshold(gbps, "--min-busbw") if gbps else None)


def test_each_nodes_mark_from_the_tests_it_was_in() -> None:
    """What a drain records and a resume compares: a good node the least its passes proved,
    any other node the most its tests asked."""
    results = [_result(("a", "b"), True, 10.0), _result(("a", "c"), True, 40.0, ring=True),
               _result(("c", "d"), False, 40.0, at=1 << 20), _result(("e", "d"), False, None)]
    marks = node_marks(results, ["a", "b", "c", "d", "e", "f"], good=["a", "b", "f"],
                       rdma_bw=True)
    a, b, c, d = (marks[n] for n in "abcd")
    assert a is not None and (a.busbw_gbps, a.at_bytes, a.algorithm) == (10.0, 4 << 20, None)
    assert b is not None and b.busbw_gbps == 10.0 and b.expect_transport == "ib" and b.rdma_bw
    assert c is not None and (c.busbw_gbps, c.at_bytes, c.algorithm) == (40.0, 1 << 20, "Ring")
    assert d is not None and d.busbw_gbps == 40.0
    assert marks["e"] is not None and marks["e"].busbw_gbps is None
    assert marks["f"] is None  # good without a pass of its own (a --partners node)


def test_a_good_nodes_mark_holds_ib_write_bw_only_where_it_measured_a_port() -> None:
    """`--rdma-bw` with no ACTIVE port on b measured nothing there: b's pass proves no
    ib_write_bw, so it lifts no drain that needed one; a, whose port was measured, does;
    the drained side (c, d) records that ib_write_bw was asked, measured or not."""
    results = [_result(("a", "b"), True, 10.0), _result(("c", "d"), False, 10.0)]
    marks = node_marks(results, ["a", "b", "c", "d"], good=["a", "b"], rdma_bw=True,
                       rdma_measured=["a", "c"])
    assert {n: m.rdma_bw for n, m in marks.items() if m is not None} == \
        {"a": True, "b": False, "c": True, "d": True}
    drained = node_marks(results, ["b"], good=[], rdma_bw=True, rdma_measured=[])["b"]
    # covers(): why the pass does not lift the drain (None: it does)
    assert drained is not None and "ib_write_bw" in str(
        marks["b"].covers(drained))  # type: ignore[union-attr]
    assert marks["a"].covers(node_marks(  # type: ignore[union-attr]
        results, ["a"], good=[], rdma_bw=True)["a"]) is None
