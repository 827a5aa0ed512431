"""What the node-local check keeps between runs (nodetune.check.local_state): its previous
check, by boot, and where Xids count from once an operator returned the node to service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodetune.check import local_state as ls
from nodetune.slurm.state import SlurmNode

HEALTH_FAIL = {"time": 1000.0, "xid": "fail", "xid_last": 990.0,
               "rdma_counters": {"mlx5_0/1": {"link_downed": 1}}}


def test_the_previous_check_reads_back_for_the_same_boot_and_node_only(tmp_path: Path) -> None:
    ls.save(tmp_path, "n1", "boot-a", ls.State(), HEALTH_FAIL, out_of_service=True)
    assert (tmp_path / ls.PREVIOUS).stat().st_mode & 0o777 == 0o600
    state = ls.load(tmp_path, "n1", "boot-a")
    assert state.xid_held and state.xid_last == 990.0 and state.time == 1000.0
    assert state.counters == {"mlx5_0/1": {"link_downed": 1}}
    prev = ls.previous(state)
    assert prev.counters == state.counters and "previous health check" in prev.counters_what
    # After a reboot the counters and Xids start again; another node's file is not this one's.
    assert ls.load(tmp_path, "n1", "boot-b") == ls.State()
    assert ls.load(tmp_path, "n2", "boot-a") == ls.State()
    assert ls.load(tmp_path, "n1", "") == ls.State()
    (tmp_path / ls.PREVIOUS).write_text("{not json")
    assert ls.load(tmp_path, "n1", "boot-a") == ls.State()


@pytest.mark.parametrize(("status", "out", "since", "held"), [
    ("pass", False, 1000.0, False),   # a pass or a warning moves the point to this check
    ("warn", False, 1000.0, False),
    ("fail", True, 500.0, True),      # a failure keeps it, held while the node is out
    ("fail", False, 500.0, False),    # the drain did not go through: not held
])
def test_where_xids_count_from_after_a_check(tmp_path: Path, status: str, out: bool,
                                             since: float, held: bool) -> None:
    before = ls.State(xid_since=500.0, xid_since_what="the health check of then")
    ls.save(tmp_path, "n1", "b", before, {**HEALTH_FAIL, "xid": status}, out_of_service=out)
    doc = json.loads((tmp_path / ls.PREVIOUS).read_text())
    assert (doc["xid_since"], doc["xid_held"]) == (since, held)


@pytest.mark.parametrize(("node", "cleared"), [
    (SlurmNode("n1", "idle"), True),                          # resumed: the Xid is cleared
    (SlurmNode("n1", "allocated"), True),
    (SlurmNode("n1", "idle+drain", "nodetune: gpu.xid Xid 79"), False),  # still out
    (SlurmNode("n1", "down", "Not responding"), False),
    (None, False),                                            # Slurm unread: nothing cleared
])
def test_a_held_xid_is_cleared_only_once_the_node_is_back_in_service(
        node: SlurmNode | None, cleared: bool) -> None:
    state = ls.State(time=1000.0, xid_since=500.0, xid_last=990.0, xid_held=True)
    after = ls.cleared(state, node)
    assert (after.xid_since == 990.001) is cleared, after
    assert after.xid_held is not cleared
    assert ls.cleared(ls.State(xid_last=990.0), SlurmNode("n1", "idle")).xid_since is None
