"""The run-time health checks end to end on the lab: each `nodetune lab fault` plants the real
tool's evidence where `check` reads it on one node (a stand-in kernel log, a stand-in
sysfs RDMA port, stand-in dcgmi / lspci: a container has no GPU or ConnectX NIC), `check`
names the node, device and cause with exit 1, `check --drain` drains it in the lab's real
slurmctld, and once the fault is cleared `check --resume` returns it; the same for a slow
RDMA port measured against a reference peer (`check --rdma-peer`), and for the node-local
signals of issue 39 (a downtrained HCA and its AER errors, a skewed clock, a host-wide NCCL
variable, a hung nvidia-smi, an OFED version off the fleet's), planted together."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune.lab import faults as lab_faults
from tests.conftest import run_nodetune
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


@pytest.fixture(scope="module", autouse=True)
def tuned(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The network roles applied once for the module (earlier modules leave drift): every
    other check passes, so each planted fault is its test's one failure. Each test ends
    with a clean check (its fault cleared), so the next finds the nodes as this left them."""
    res = run_nodetune("apply", str(slurm_lab.inventory), "-t", "net_sysctl,net_mtu",
                       runs_dir=tmp_path_factory.mktemp("tuned") / "runs")
    assert res.code == 0, res.stdout + res.stderr


def check(lab: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    return nodetune("check", str(lab.inventory), "--skip-allreduce", *args)


def by_name(doc: dict[str, Any], node: str) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in doc["checks"][node]}


@pytest.mark.parametrize(("kind", "name", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_is_named_drained_and_resumed_once_cleared(
        clean: Any, kind: str, name: str, words: list[str]) -> None:
    good, bad = clean.nodes[0], clean.nodes[1]
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


def _alias_inventory(lab: Any, tmp_path: Path, node: str) -> tuple[Path, str]:
    """The lab's inventory with ``node`` listed a second time under another name (the same
    container): fleet.versions needs three nodes for a majority, and the Slurm lab has two.
    The alias is no Slurm node: a check on this inventory asks Slurm nothing
    (``--allow-busy``, no ``--drain``)."""
    inv = tmp_path / "inventory"
    shutil.copytree(lab.inventory, inv)
    data = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    alias = f"{node}-again"
    hosts[alias] = dict(hosts[str(node)])
    (inv / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return inv, alias


def _running(lab: Any, node: str, *words: str) -> list[str]:
    """The node's processes whose command line holds one of ``words``."""
    listing = lab.sh(node, "python3", "-c", (
        "import os\nfor p in os.listdir('/proc'):\n"
        "    try: print(open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0',b' ').decode())\n"
        "    except (OSError, ValueError): pass"))
    return [ln for ln in listing.splitlines() if any(w in ln for w in words)]


def test_the_node_local_signals_are_named_with_their_reasons_and_cleared(
        clean: Any, tmp_path: Path) -> None:
    """pcie-aer, clock-skew, global-env and another OFED on one node (three nodes with an
    alias, for fleet.versions' majority): one check names each with its reason (exit 1);
    one more round of AER errors fails node.pcie_aer since that check; smi-hang on the other
    node alone is "not assessed" (exit 5), nothing left running there; cleared, a clean
    check (exit 0)."""
    good, bad = clean.nodes[0], clean.nodes[1]
    environment = clean.sh(bad, "sh", "-c", "cat /etc/environment 2>&1 || true")
    inv, alias = _alias_inventory(clean, tmp_path, good)
    try:
        for kind in ("pcie-aer", "clock-skew", "global-env"):
            print(lab_faults.apply(bad, kind))
        print(lab_faults.apply(bad, "ofed-version", ofed_version="OFED-internal-24.10-3.2.5"))
        print(lab_faults.apply(good, "ofed-version"))  # the fleet's: DOCA-Host 3.2.1's
        code, doc, err = nodetune("check", str(inv), "--skip-allreduce", "--allow-busy")
        assert code == 1, err
        assert {n: doc["nodes"][n]["verdict"] for n in (good, alias, bad)} == {
            good: "good", alias: "good", bad: "bad"}, doc["nodes"]
        assert sorted(doc["nodes"][bad]["details"]["failed_checks"]) == [
            "fabric.pcie[mlx5_0]", "node.global_env", "node.time_sync"]
        found = by_name(doc, bad)
        link = found["fabric.pcie[mlx5_0]"]
        assert (link["status"], link["measured"], link["expected"]) == ("fail", "x8 32 GT/s",
                                                                        "x16 32 GT/s")
        assert "mlx5_0 (0000:18:00.0): link trained at x8, below its x16" in link["message"]
        assert link["action"] == "reboot"
        aer = found["node.pcie_aer"]
        assert aer["status"] == "pass" and "correctable 4, nonfatal 0, fatal 0" in \
            aer["measured"], aer
        clock = found["node.time_sync"]
        assert clock["status"] == "fail" and clock["action"] == "re-run", clock
        assert clock["measured"] == "250.000 ms slow (chrony, 192.168.1.1, stratum 3)"
        assert "the clock is 250.0 ms slow of NTP time (limit 100 ms)" in clock["message"]
        env = found["node.global_env"]
        assert env["status"] == "fail", env
        assert "NCCL_SOCKET_IFNAME=eth0 set host-wide in /etc/environment:" in env["message"]
        # what NCCL would use otherwise: the node's /etc/nccl.conf where an earlier test's
        # apply wrote it, else the inventory's nccl_config_socket_ifname
        assert re.search(r"contradicts NCCL_SOCKET_IFNAME==eth1 in (/etc/nccl\.conf|"
                         r"nccl_config_socket_ifname)", env["message"]), env["message"]
        fleet = found["fleet.versions"]
        assert fleet["status"] == "warn", fleet
        assert ("OFED/DOCA OFED-internal-24.10-3.2.5, the others OFED-internal-25.10-1.7.1 "
                "(2 of 3 nodes)") in fleet["message"]
        assert by_name(doc, good)["fleet.versions"]["status"] == "pass"
        assert doc["fleet"]["differ"] == {bad: ["ofed"]}
        assert doc["fleet"]["versions"]["ofed"]["majority"] == "OFED-internal-25.10-1.7.1"
        # one more round of errors on the HCA's link: named since that check
        print(lab_faults.apply(bad, "pcie-aer"))
        code, doc, err = nodetune("check", str(clean.inventory), "--limit", bad,
                                  "--skip-allreduce")
        assert code == 1, err
        aer = by_name(doc, bad)["node.pcie_aer"]
        assert aer["status"] == "fail" and aer["action"] == "service", aer
        assert "0000:18:00.0 (HCA mlx5_0): nonfatal +1 [CmpltTO 1]" in aer["message"]
        assert "since the check of " in aer["message"]
        # a hung nvidia-smi: not assessed, never a pass, its process group killed
        print(lab_faults.apply(good, "smi-hang"))
        code, doc, err = nodetune("check", str(clean.inventory), "--limit", good,
                                  "--timeout", "30")
        assert code == 5, (err, doc["nodes"])
        assert doc["nodes"][good]["verdict"] == "not_assessed", doc["nodes"]
        gpu = by_name(doc, good)
        for name in ("gpu.count", "gpu.driver", "gpu.ecc"):
            assert gpu[name]["status"] == "unknown", gpu[name]
            assert gpu[name]["message"] == ("could not be assessed: nvidia-smi gave no answer "
                                            "within 15 s (its process group was killed)")
        assert doc["nodes"][good]["action"] == "re-run"
        assert _running(clean, good, "nvidia-smi", "sleep 86400") == []
    finally:
        for node in (bad, good):
            print(lab_faults.apply(node, "clear"))
    for node in (bad, good):
        assert lab_faults.active(node) == [], node
        assert clean.sh(node, "sh", "-c", "ls -A /var/lib/nodetune-lab /usr/local/share/"
                        "nodetune-lab 2>&1 || true").count("No such file") == 2
    assert clean.sh(bad, "sh", "-c", "cat /etc/environment 2>&1 || true") == environment
    code, doc, err = nodetune("check", str(clean.inventory), "--skip-allreduce")
    assert code == 0, (err, doc["nodes"])
    found = by_name(doc, bad)
    assert found["fabric.pcie"]["status"] == "skip" and found["node.pcie_aer"]["status"] == \
        "skip"
    assert found["node.global_env"]["status"] != "fail", found["node.global_env"]
    assert "NCCL_SOCKET_IFNAME" not in found["node.global_env"]["measured"]
    assert found["node.time_sync"]["status"] != "fail", found["node.time_sync"]
