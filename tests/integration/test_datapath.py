"""A copy of inventory/example pointed at the lab: validate measures over the fabric it names.

The lab's nodes have eth0 (management: SSH) and eth1 (the fabric). The
inventory here is the example's own files with the lab's names in them: the
fabric interface appears only where an operator already writes it
(``nccl_config_socket_ifname``, ``net_mtu_interfaces``), with no validate-specific
interface or master address. The traffic's interface is read back from the
node's own counters, and a real token-bucket filter on eth1 makes that link slow.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from nodetune.ansible.inventory import load
from nodetune.lab import nodes as lab_mod
from tests.conftest import REPO, run_nodetune
from tests.integration.conftest import Lab

# One 16 MiB size: at 200 mbit a gloo pair measures about 0.02 GB/s there, under the
# lab-gloo profile's 0.05 GB/s; a healthy lab pair is several times above it.
FAST = ["--profile", "lab-gloo", "--sizes", "16M", "--iters", "5", "--warmup", "1",
        "--timeout", "120"]
SLOW = ["tc", "qdisc", "replace", "dev", "eth1", "root", "tbf", "rate", "200mbit", "burst",
        "256kbit", "latency", "100ms"]

pytestmark = pytest.mark.integration


def example_inventory(lab: Lab, dest: Path, *, fabric: bool) -> Path:
    """inventory/example, copied as an operator would, with the lab's hosts and names.

    ``fabric=False`` leaves out the two files that name the fabric (an inventory that
    says nothing about it: the route to the master decides, which is eth0 here).
    """
    shutil.copytree(REPO / "inventory" / "example", dest)
    shutil.rmtree(dest / "host_vars")  # the example's per-host file names its own hosts
    lab_doc = yaml.safe_load((lab.inventory / "hosts.yml").read_text())["all"]
    lab_vars = lab_doc["vars"]
    hosts = {name: {"ansible_host": h["ansible_host"]}  # the SSH (eth0) address only
             for name, h in lab_doc["children"]["gpu_nodes"]["hosts"].items()}
    (dest / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"gpu_nodes": {"children": {"rack_a": {"hosts": hosts}}}}}}))
    (dest / "group_vars" / "all.yml").write_text(yaml.safe_dump(
        {k: lab_vars[k] for k in ("ansible_user", "ansible_ssh_private_key_file",
                                  "ansible_ssh_common_args", "ansible_python_interpreter")}))
    group = dest / "group_vars" / "gpu_nodes"
    nccl = yaml.safe_load((group / "nccl_config.yml").read_text())
    assert nccl["nccl_config_socket_ifname"] == "=ens1f0np0", "the example changed"
    nccl["nccl_config_socket_ifname"] = "=eth1"
    (group / "nccl_config.yml").write_text(yaml.safe_dump(nccl))
    mtu = yaml.safe_load((group / "net_mtu.yml").read_text())
    mtu["net_mtu_interfaces"] = [{"name": "eth1", "mtu": 9000}]
    (group / "net_mtu.yml").write_text(yaml.safe_dump(mtu))
    validate = yaml.safe_load((group / "validate.yml").read_text())
    python = lab_vars.get("nodetune_python") or lab_mod.install_torch()
    # The example's python path, profile and IB expectation are a GPU site's; the test
    # gives profile and expectation on the command line.
    validate = {"nodetune_python": python, "nodetune_env": validate["nodetune_env"]}
    assert not any("ifname" in k or "master" in k for k in validate)
    (group / "validate.yml").write_text(yaml.safe_dump(validate))
    if not fabric:
        (group / "nccl_config.yml").unlink()
        (group / "net_mtu.yml").unlink()
    return dest


@pytest.fixture(scope="module")
def fabric_inv(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_inventory(lab, tmp_path_factory.mktemp("example") / "prod", fabric=True)


def tx_bytes(lab: Lab, node: str, iface: str) -> int:
    return int(lab.sh(node, "cat", f"/sys/class/net/{iface}/statistics/tx_bytes"))


def record(runs_dir: Path) -> Path:
    (path,) = runs_dir.glob("*-validate")
    return path


def test_copied_example_inventory_validates_over_its_fabric(
        lab: Lab, fabric_inv: Path, runs_dir: Path, tmp_path: Path) -> None:
    a, b = (h.name for h in load(fabric_inv).hosts)
    before = {i: tx_bytes(lab, a, i) for i in ("eth0", "eth1")}
    junit = tmp_path / "junit.xml"
    res = run_nodetune("validate", str(fabric_inv), *FAST, "--junit", str(junit), "--json",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    sent = {i: tx_bytes(lab, a, i) - before[i] for i in ("eth0", "eth1")}
    # 7 all_reduces of 16 MiB: each rank sends about 16 MiB per op. Over eth1, not eth0.
    assert sent["eth1"] > 7 * (16 << 20), sent
    assert sent["eth0"] < 16 << 20, sent

    doc = res.json()
    result = doc["result"]
    assert result["path"] == "gloo/TCP eth1"
    assert result["transport"]["interfaces"] == ["eth1"]
    assert [(p["host"], p["interface"], p["source"], p["ssh_interface"], p["over_ssh"])
            for p in result["paths"]] == [
        (a, "eth1", "nccl_config_socket_ifname", "eth0", False),
        (b, "eth1", "nccl_config_socket_ifname", "eth0", False)]
    assert result["warnings"] == []
    assert {e["GLOO_SOCKET_IFNAME"] for e in doc["env"].values()} == {"eth1"}

    html = (record(runs_dir) / "report.html").read_text()
    assert "transport / interface" in html and "gloo/TCP eth1" in html
    assert "data-path" not in html  # no warning banner
    (case,) = [c for c in ET.parse(junit).iter("testcase")
               if c.get("classname") == "nodetune.validate.pair"]
    assert case.get("name") == f"{a} <-> {b} round 1 over gloo/TCP eth1"


def test_a_throttled_fabric_fails_instead_of_passing_over_ssh(
        lab: Lab, fabric_inv: Path, runs_dir: Path) -> None:
    slow = load(fabric_inv).hosts[1].name
    lab.sh(slow, *SLOW)
    try:
        res = run_nodetune("validate", str(fabric_inv), *FAST, "--json", runs_dir=runs_dir)
    finally:
        lab.sh(slow, "tc", "qdisc", "del", "dev", "eth1", "root", check=False)
    assert res.code == 1, res.stdout + res.stderr
    result = res.json()["result"]
    assert result["path"] == "gloo/TCP eth1"
    assert result["largest_busbw_gbps"] < 0.05
    assert any("below 0.05 GB/s" in r for r in result["reasons"]), result["reasons"]


def test_a_data_path_over_the_ssh_interface_warns_and_fails_an_expectation(
        lab: Lab, tmp_path: Path, runs_dir: Path) -> None:
    inv = example_inventory(lab, tmp_path / "prod", fabric=False)
    a, b = (h.name for h in load(inv).hosts)
    res = run_nodetune("validate", str(inv), *FAST, runs_dir=runs_dir, env={"COLUMNS": "200"})
    assert res.code == 0, res.stdout + res.stderr
    assert "warning: the data path is the interface SSH uses" in res.stdout
    doc = json.loads((record(runs_dir) / "report.json").read_text())
    result = doc["result"]
    assert result["path"] == "gloo/TCP eth0"
    assert [(p["interface"], p["source"], p["over_ssh"]) for p in result["paths"]] == [
        ("eth0", "route to the master", True)] * 2
    (warning,) = result["warnings"]
    assert f"{a} (eth0)" in warning and f"{b} (eth0)" in warning
    html = (record(runs_dir) / "report.html").read_text()
    assert 'class="banner warn data-path"' in html and "gloo/TCP eth0" in html

    strict = tmp_path / "strict-runs"
    res = run_nodetune("validate", str(inv), *FAST, "--expect-transport", "socket", "--json",
                       runs_dir=strict)
    assert res.code == 1, res.stdout + res.stderr
    result = res.json()["result"]
    assert result["verdict"] == "fail"
    assert any(r.startswith("expected socket over the fabric, but the data path is the "
                            "interface SSH uses") for r in result["reasons"]), result["reasons"]


def test_the_fleet_table_and_its_pairs_show_transport_and_interface(
        fabric_inv: Path, runs_dir: Path) -> None:
    """Fleet mode on the two lab nodes (one under test, one known-good partner)."""
    a, b = (h.name for h in load(fabric_inv).hosts)
    res = run_nodetune("validate", str(fabric_inv), *FAST, "--limit", a, "--partners", b,
                       "--skip-checks", runs_dir=runs_dir, env={"COLUMNS": "250"})
    assert res.code == 0, res.stdout + res.stderr
    header = next(ln for ln in res.stdout.splitlines() if "node rank 0" in ln)
    assert "transport" in header
    (row,) = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("1 ")]
    assert row[:6] == ["1", a, b, "pass", "gloo/TCP", "eth1"], res.stdout
    assert "warning" not in res.stdout
    doc = json.loads((record(runs_dir) / "report.json").read_text())
    (pair,) = doc["pairs"]
    assert (pair["path"], pair["transport"], pair["interfaces"]) == (
        "gloo/TCP eth1", "gloo/TCP", ["eth1"])
    assert [p["interface"] for p in pair["paths"]] == ["eth1", "eth1"]
