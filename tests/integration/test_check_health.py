"""The run-time health checks end to end on the lab: each `nodetune lab fault` plants the real
tool's evidence where `check` reads it on one node (a stand-in kernel log, a stand-in
sysfs RDMA port, stand-in dcgmi / lspci: a container has no GPU or ConnectX NIC), `check`
names the node, device and cause with exit 1, `check --drain` drains it in the lab's real
slurmctld, and once the fault is cleared `check --resume` returns it; the same for a slow
RDMA port measured against a reference peer (`check --rdma-peer`)."""

from __future__ import annotations

from typing import Any

import pytest

from nodetune.lab import faults as lab_faults
from tests.integration.test_slurm import clean, nodetune, show, slurm_lab

__all__ = ["clean", "slurm_lab"]  # fixtures this module uses

FAULTS = [
    ("xid", "gpu.xid", ["GPU at 0000:19:00: Xid 79 GPU has fallen off the bus",
                        "needs node reboot"]),
    ("rdma-flap", "fabric.rdma_errors[mlx5_0/1]", ["mlx5_0/1: link_downed 11 >= 10"]),
    ("dcgm-fail", "dcgm.diag", ["PCIe on GPU 1: Error using CUDA API cudaMemcpy"]),
    ("pcie-acs", "gpu.pcie_acs", ["bridge 0000:17:00.0 (Broadcom / LSI PEX890xx",
                                  "GPU 0000:19:00.0 - NIC 0000:18:00.0"]),
]


def check(lab: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    return nodetune("check", str(lab.inventory), "--skip-allreduce", *args)


def by_name(doc: dict[str, Any], node: str) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in doc["checks"][node]}


@pytest.mark.parametrize(("kind", "name", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_is_named_drained_and_resumed_once_cleared(
        clean: Any, kind: str, name: str, words: list[str]) -> None:
    good, bad = clean.nodes[0], clean.nodes[1]
    code, _doc, err = nodetune("apply", str(clean.inventory), "-t", "net_sysctl,net_mtu")
    assert code == 0, err
    code, doc, err = check(clean)
    assert code == 0, (err, doc["nodes"])
    before = by_name(doc, bad)
    assert before[name.split("[", maxsplit=1)[0]]["status"] == "skip", before  # nothing planted yet
    try:
        print(lab_faults.apply(bad, kind))
        code, doc, err = check(clean, "--drain")
        assert code == 1, err
        assert doc["nodes"][good]["verdict"] == "good"
        assert doc["nodes"][bad]["verdict"] == "bad"
        assert doc["nodes"][bad]["details"]["failed_checks"] == [name]
        found = by_name(doc, bad)[name]
        assert found["status"] == "fail", found
        for word in words:
            assert word in found["message"], found
        assert found["source"] and found["expected"]
        (action,) = doc["slurm"]["actions"]
        assert (action["node"], action["action"], action["state_after"]) == (
            bad, "drain", "IDLE+DRAIN")
        shown = show(clean, bad)
        assert shown["state"] == "IDLE+DRAIN" and name in shown["reason"], shown
        if kind == "rdma-flap":
            # One more flap after that check: named as a rise since it, though still ACTIVE.
            lab_faults.apply(bad, kind)
            code, doc, err = check(clean)
            assert code == 1, err
            flap = by_name(doc, bad)[name]
            assert "link_downed +1" in flap["measured"], flap
            assert "since the check of " in flap["message"], flap
    finally:
        print(lab_faults.apply(bad, "clear"))
    assert kind not in lab_faults.active(bad)
    code, doc, err = check(clean, "--resume")
    assert code == 0, (err, doc["nodes"])
    assert by_name(doc, bad)[name.split("[", maxsplit=1)[0]]["status"] == "skip"
    actions = {a["node"]: a for a in doc["slurm"]["actions"]}
    assert actions[bad]["action"] == "resume" and actions[bad]["state_after"] == "IDLE"
    assert show(clean, bad)["state"] == "IDLE"


def test_a_slow_rdma_port_is_named_drained_and_resumed_once_cleared(clean: Any) -> None:
    """fabric.rdma_bw against a reference peer (`check --rdma-peer`): both nodes get the
    stand-in port and ib_write_bw (`lab fault rdma-port`), the checked node's at 120 Gb/s."""
    peer, bad = clean.nodes[0], clean.nodes[1]
    name = "fabric.rdma_bw[mlx5_0]"
    code, _doc, err = nodetune("apply", str(clean.inventory), "-t", "net_sysctl,net_mtu")
    assert code == 0, err  # every other check passes: the slow port is the one failure
    try:
        print(lab_faults.apply(peer, "rdma-port"))
        print(lab_faults.apply(bad, "rdma-port", rate="120gbit"))
        code, doc, err = check(clean, "--rdma-peer", peer, "--drain")
        assert code == 1, err
        assert doc["nodes"][bad]["verdict"] == "bad", doc["nodes"]
        assert name in doc["nodes"][bad]["details"]["failed_checks"]
        found = by_name(doc, bad)[name]
        assert found["message"] == f"mlx5_0 to {peer}: 120 Gb/s, below 360 (host memory)"
        actions = {a["node"]: a for a in doc["slurm"]["actions"]}
        assert (actions[bad]["action"], actions[bad]["state_after"]) == ("drain", "IDLE+DRAIN")
        assert peer not in actions or actions[peer]["action"] != "drain", actions
        shown = show(clean, bad)
        assert shown["state"] == "IDLE+DRAIN" and name in shown["reason"], shown
    finally:
        for node in (bad, peer):
            print(lab_faults.apply(node, "clear"))
    code, doc, err = check(clean, "--rdma-peer", peer, "--resume")
    assert code == 0, (err, doc["nodes"])
    assert by_name(doc, bad)["fabric.rdma_bw"]["status"] == "skip"  # no port any more
    actions = {a["node"]: a for a in doc["slurm"]["actions"]}
    assert actions[bad]["action"] == "resume" and actions[bad]["state_after"] == "IDLE"
    assert show(clean, bad)["state"] == "IDLE"
