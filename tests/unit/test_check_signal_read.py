"""signal_read.kept_state: the one rule for what a counted signal kept in a check's
``health[NODE]`` (or a file keeping it under the same keys)."""

from __future__ import annotations

from nodetune.check.signal_read import kept_state

KEEPS = ("pcie_aer", "pcie_aer_window")


def test_its_keeps_keys_where_the_first_is_an_object() -> None:
    assert kept_state(KEEPS, {"pcie_aer": {"0000:01:00.0": {"fatal": 1}},
                              "pcie_aer_window": [1.0, 2.0]}) == {
        "pcie_aer": {"0000:01:00.0": {"fatal": 1}}, "pcie_aer_window": [1.0, 2.0]}
    assert kept_state(KEEPS, {"pcie_aer": {}}) == {"pcie_aer": {}, "pcie_aer_window": None}
    assert kept_state(("rdma_counters",), {"rdma_counters": {"mlx5_0/1": {}}}) == {
        "rdma_counters": {"mlx5_0/1": {}}}


def test_none_where_the_first_key_is_not_an_object() -> None:
    for first in (None, [], "x", 3, 1.5):
        assert kept_state(KEEPS, {"pcie_aer": first, "pcie_aer_window": [1.0]}) is None
    assert kept_state(KEEPS, {}) is None
    assert kept_state(KEEPS, {"pcie_aer_window": [1.0]}) is None  # only a later key


def test_other_keys_are_sliced_away() -> None:
    entry = {"time": 5.0, "xid": "pass", "xid_last": None, "rdma_counters": {"a": {}},
             "pcie_aer": {"p": {"fatal": 0}}, "pcie_aer_window": None}
    assert kept_state(KEEPS, entry) == {"pcie_aer": {"p": {"fatal": 0}}, "pcie_aer_window": None}
    assert kept_state(("rdma_counters",), entry) == {"rdma_counters": {"a": {}}}
