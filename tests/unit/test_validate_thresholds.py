"""Threshold profiles and the order in which a threshold is chosen."""

from __future__ import annotations

import pytest

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.validate import thresholds
from nodetune.validate.plan import Options, Pair, plan_pair


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
