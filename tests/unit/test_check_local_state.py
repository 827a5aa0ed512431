"""What the node-local check keeps between runs (nodetune.check.local_state): its previous
check, by boot, and where Xids count from once an operator returned the node to service."""

from __future__ import annotations

import json
import sys
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
    assert state.kept == {"fabric.rdma_errors": {"rdma_counters": {"mlx5_0/1": {"link_downed": 1}}}}
    rdma = ls.previous(state).of("fabric.rdma_errors")
    assert rdma.state == state.kept["fabric.rdma_errors"] and rdma.time == 1000.0
    assert "previous health check" in rdma.what
    # After a reboot the counters and Xids start again; another node's file is not this one's.
    assert ls.load(tmp_path, "n1", "boot-b") == ls.State()
    assert ls.load(tmp_path, "n2", "boot-a") == ls.State()
    assert ls.load(tmp_path, "n1", "") == ls.State()
    (tmp_path / ls.PREVIOUS).write_text("{not json")
    assert ls.load(tmp_path, "n1", "boot-a") == ls.State()


# previous.json as the version before wrote it (a field of its own per counted signal): the
# same keys are read back and written again.
EARLIER_FILE = {"version": 1, "slurm_node": "n1", "boot_id": "b", "time": 1000.0,
                "rdma_counters": {"mlx5_0/1": {"link_downed": 1}},
                "pcie_aer": {"0000:18:00.0": {"correctable": 2, "nonfatal": 0, "fatal": 0}},
                "pcie_aer_window": {"since": 900.0, "correctable": {"0000:18:00.0": 2}},
                "nvlink_errors": {"0/1": {"crc": 7, "replay": 0}},
                "xid_since": 500.0, "xid_since_what": "the health check of then",
                "xid_last": None, "xid_held": False}
KEPT = ("rdma_counters", "pcie_aer", "pcie_aer_window", "nvlink_errors")


def test_a_previous_file_of_the_version_before_reads_back_and_is_written_alike(
        tmp_path: Path) -> None:
    (tmp_path / ls.PREVIOUS).write_text(json.dumps(EARLIER_FILE))
    state = ls.load(tmp_path, "n1", "b")
    prev = ls.previous(state)
    assert prev.xid_since == 500.0 and prev.time == 1000.0
    assert prev.of("fabric.rdma_errors").state == {"rdma_counters": {"mlx5_0/1": {"link_downed": 1}}}
    aer = prev.of("node.pcie_aer")
    assert aer.state == {k: EARLIER_FILE[k] for k in ("pcie_aer", "pcie_aer_window")}
    assert aer.time == 1000.0 and "previous health check" in aer.what
    assert prev.of("gpu.nvlink_errors").state == {"nvlink_errors": EARLIER_FILE["nvlink_errors"]}
    assert prev.of("gpu.nvlink_errors").time == 1000.0
    ls.save(tmp_path, "n1", "b", state, {"time": 1000.0, "xid": "fail",
                                         **{k: EARLIER_FILE[k] for k in KEPT}},
            out_of_service=False)
    written = json.loads((tmp_path / ls.PREVIOUS).read_text())
    assert written == EARLIER_FILE and list(written) == list(EARLIER_FILE)


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


# --- torch's versions, once per boot: a real Python importing a `torch` package that stands
# in for an installed one (a broken install, a hung import, then the repaired install).

WORKING_TORCH = {
    "__init__.py": "__version__ = '2.11.0+cu130'\nfrom torch import cuda, distributed, version\n",
    "version.py": "cuda = '13.0'\n",
    "distributed.py": "def is_available():\n    return True\n\n\n"
                      "def is_nccl_available():\n    return True\n",
    "cuda/__init__.py": "from torch.cuda import nccl\n",
    "cuda/nccl.py": "def version():\n    return (2, 28, 9)\n",
}


def _install_torch(site: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (site / "torch" / name).parent.mkdir(parents=True, exist_ok=True)
        (site / "torch" / name).write_text(text)


@pytest.mark.parametrize(("broken", "error"), [
    ("raise ImportError('libcudart.so.13: cannot open shared object file')\n", "ImportError"),
    ("import time\ntime.sleep(30)\n", "exit None"),  # a hung import, past the timeout
])
def test_a_failed_torch_import_is_not_kept_and_is_read_again_next_run(
        tmp_path: Path, broken: str, error: str) -> None:
    site = tmp_path / "site"
    _install_torch(site, {"__init__.py": broken})
    env = {"PYTHONPATH": str(site)}
    state = tmp_path / "state"
    python = sys.executable
    first = ls.VersionCache(state, timeout=3.0, boot="boot-a")
    answer = first(python, env)
    assert error in answer["error"], answer
    assert first.source["source"] == "read"
    # The install is repaired (same boot, same Python): the next run imports torch again.
    (site / "torch" / "__init__.py").unlink()
    _install_torch(site, WORKING_TORCH)
    second = ls.VersionCache(state, timeout=30.0, boot="boot-a")
    assert second(python, env) == {"torch": "2.11.0+cu130", "cuda": "13.0",
                                   "nccl_available": True, "nccl": "2.28.9"}
    assert second.source["source"] == "read"
    # A good answer is kept for the rest of the boot.
    third = ls.VersionCache(state, timeout=30.0, boot="boot-a")
    assert third(python, env)["torch"] == "2.11.0+cu130" and third.source["source"] == "cache"


def test_a_cached_failure_from_before_is_not_believed(tmp_path: Path) -> None:
    """A versions.json that an earlier version kept with an ``error`` is read again."""
    site = tmp_path / "site"
    _install_torch(site, WORKING_TORCH)
    env = {"PYTHONPATH": str(site)}
    cache = ls.VersionCache(tmp_path, timeout=30.0, boot="boot-a")
    cache(sys.executable, env)
    doc = json.loads((tmp_path / ls.VERSIONS).read_text())
    doc["torch"] = {"error": "ImportError: libcudart.so.13"}
    (tmp_path / ls.VERSIONS).write_text(json.dumps(doc))
    again = ls.VersionCache(tmp_path, timeout=30.0, boot="boot-a")
    assert again(sys.executable, env)["torch"] == "2.11.0+cu130"
    assert again.source["source"] == "read"


def test_an_answer_that_names_no_file_is_read_again(tmp_path: Path) -> None:
    """Nothing to watch for a change (a Python that reports no site-packages): not kept."""
    python = tmp_path / "python"  # a stand-in that prints torch's line and no files
    python.write_text('#!/bin/sh\necho \'{"torch": "2.11.0", "cuda": "13.0", "nccl": "2.28.9", '
                      '"nccl_available": true}\'\n')
    python.chmod(0o755)
    for _run in (1, 2):
        cache = ls.VersionCache(tmp_path / "state", timeout=30.0, boot="boot-a")
        assert cache(str(python), {})["torch"] == "2.11.0"
        assert cache.source["source"] == "read"
