"""`nodetune check` on the lab over real SSH: GPU checks skip, fabric drift is found and named,
and a later `apply` clears it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_nodetune
from tests.integration.conftest import Lab

ASKED = {
    "net_sysctl_tcp_congestion_control": "reno",
    "net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 262144 33554432"},
    "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}],
}
DRIFTED_RMEM = "4096 131072 6291456"


@pytest.fixture(scope="module")
def inv(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "lab"
    shutil.copytree(lab.inventory, path)
    (path / "group_vars").mkdir(exist_ok=True)
    (path / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(ASKED))
    return path


def by_name(doc: dict[str, Any], node: str) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in doc["checks"][node]}


def apply_network(inv: Path, runs_dir: Path, *limit: str) -> None:
    res = run_nodetune("apply", str(inv), "-t", "net_sysctl,net_mtu", *limit, runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr


def test_check_finds_drift_by_hand_and_apply_clears_it(
        lab: Lab, inv: Path, runs_dir: Path) -> None:
    apply_network(inv, runs_dir)
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert set(doc["nodes"]) == set(lab.nodes)
    for node in lab.nodes:
        checks = by_name(doc, node)
        assert doc["nodes"][node]["verdict"] == "good", doc["nodes"][node]
        assert checks["gpu.count"]["status"] == "skip"
        assert checks["gpu.count"]["message"].startswith("no GPU")
        assert checks["software.nccl"]["message"].startswith("no GPU")
        assert checks["gpu.allreduce"]["status"] == "skip"
        assert checks["gpu.allreduce"]["message"].startswith("fewer than 2 GPUs")
        assert checks["software.torch"]["status"] == "pass"  # the lab's CPU torch
        assert checks["fabric.mtu[eth1]"] == {
            "name": "fabric.mtu[eth1]", "status": "pass", "measured": "9000",
            "expected": "9000", "source": "net_mtu_interfaces (inventory)", "message": "",
            "action": "none"}
        assert checks["fabric.sysctl[net.ipv4.tcp_rmem]"]["status"] == "pass"
        assert checks["fabric.sysctl[net.ipv4.tcp_congestion_control]"]["measured"] == "reno"

    # Drift on one node, by hand, as an operator or a package script would.
    bad, good = lab.nodes[1], lab.nodes[0]
    lab.sh(bad, "ip", "link", "set", "dev", "eth1", "mtu", "1500")
    lab.sh(bad, "sysctl", "-w", f"net.ipv4.tcp_rmem={DRIFTED_RMEM}")
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir)
    assert res.code == 1, res.stdout + res.stderr
    doc = res.json()
    assert doc["status"] == "fail" and doc["exit_code"] == 1
    assert doc["nodes"][good]["verdict"] == "good"
    assert doc["nodes"][bad]["verdict"] == "bad"
    assert next(iter(doc["nodes"])) == bad, "worst node first"
    assert set(doc["nodes"][bad]["details"]["failed_checks"]) == {
        "fabric.mtu[eth1]", "fabric.sysctl[net.ipv4.tcp_rmem]"}
    mtu = by_name(doc, bad)["fabric.mtu[eth1]"]
    assert (mtu["status"], mtu["measured"], mtu["expected"]) == ("fail", "1500", "9000")
    rmem = by_name(doc, bad)["fabric.sysctl[net.ipv4.tcp_rmem]"]
    assert (rmem["status"], rmem["measured"]) == ("fail", DRIFTED_RMEM)
    assert rmem["source"] == "net_sysctl_settings_overrides (inventory)"
    assert doc["checks"][bad][0]["status"] == "fail", "failures first"

    # The human view names the node, the interface and the key.
    human = run_nodetune("check", str(inv), runs_dir=runs_dir, env={"COLUMNS": "250"})
    assert human.code == 1
    finding = [ln for ln in human.stdout.splitlines() if "fabric.mtu[eth1]" in ln]
    assert finding and bad in finding[0] and "1500" in finding[0], human.stdout
    assert any(bad in ln and "net.ipv4.tcp_rmem" in ln for ln in human.stdout.splitlines())

    apply_network(inv, runs_dir, "--limit", bad)
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stdout
    assert all(v["verdict"] == "good" for v in res.json()["nodes"].values())
    assert lab.sh(bad, "cat", "/sys/class/net/eth1/mtu") == "9000"


def test_one_node_all_reduce_runs_through_the_collective_launcher(lab: Lab) -> None:
    """The launcher path of check's gpu.allreduce on a CPU node: one host, two gloo ranks
    (the lab has no GPU; on GPUs the same plan runs NCCL, one rank per GPU)."""
    from nodetune.ansible.inventory import load
    from nodetune.collective import plan as cplan
    from nodetune.collective.launch import run_pair

    host = load(lab.inventory).hosts[0]
    options = cplan.Options(backend="gloo", nproc_per_node=2, sizes="1M:4M", timeout=120)
    m = run_pair(cplan.plan_node(host, options))
    assert m.world == 2
    assert [s.bytes for s in m.sizes] == [1 << 20, 4 << 20]
    assert all(s.wrong == 0 and s.busbw > 0 for s in m.sizes)
    leftovers = lab.sh(host.name, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true")
    assert leftovers == "", "the run removed its temporary directory"


def test_a_full_dev_shm_fails_software_shm(lab: Lab, tmp_path: Path, runs_dir: Path) -> None:
    """A real tmpfs filled to the last byte on one node: its size is enough, its free space
    is not. A small tmpfs mounted over the node's /dev/shm (privileged node) keeps the fill
    cheap; unmounting it brings the node's own /dev/shm back."""
    node = lab.nodes[0]
    inv = tmp_path / "lab"
    shutil.copytree(lab.inventory, inv)
    (inv / "group_vars").mkdir(exist_ok=True)
    (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({"nodetune_min_shm": "4M"}))
    lab.sh(node, "mount", "-t", "tmpfs", "-o", "size=8m", "nodetune-test-shm", "/dev/shm")
    try:
        # Other checks may fail on a lab nobody applied yet: only software.shm is looked at.
        res = run_nodetune("check", str(inv), "--limit", node, "--json", runs_dir=runs_dir)
        assert res.code in (0, 1), res.stdout + res.stderr
        shm = by_name(res.json(), node)["software.shm"]
        assert (shm["status"], shm["measured"]) == ("pass", "8.0 MiB free of 8.0 MiB"), shm

        # dd stops with "No space left on device" once the tmpfs is full.
        lab.sh(node, "sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M 2>/dev/null; true")
        assert lab.sh(node, "df", "--output=avail", "/dev/shm").split()[-1] == "0"
        res = run_nodetune("check", str(inv), "--limit", node, "--json", runs_dir=runs_dir)
        assert res.code == 1, res.stdout + res.stderr
        doc = res.json()
        shm = by_name(doc, node)["software.shm"]
        assert (shm["status"], shm["measured"], shm["expected"]) == (
            "fail", "0 B free of 8.0 MiB", ">= 4.0 MiB free"), shm
        assert "remove what fills it" in shm["message"]
        assert doc["nodes"][node]["verdict"] == "bad"
        assert "software.shm" in doc["nodes"][node]["details"]["failed_checks"]
    finally:
        lab.sh(node, "umount", "/dev/shm", check=False)
    assert "nodetune-test-shm" not in lab.sh(node, "cat", "/proc/mounts")
