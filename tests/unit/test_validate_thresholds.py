"""Threshold profiles and the order in which a threshold is chosen."""

from __future__ import annotations

import pytest

from nodetune.errors import InputError
from nodetune.validate import thresholds


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
