"""fabric.roce_cc: DCQCN's reaction and notification points on for roce_qos's priorities,
read by the real node probe from a stand-in sysfs tree of a RoCE node
(tests/unit/test_check_probe.py's), and the PPCC register through a stand-in ``mlxreg``
only when asked (``check --read-ppcc``).

The stand-in mlxreg prints what mlxreg prints for a GET (mstflint mlxreg/mlxreg_ui.cpp:
"Sending access register...", then a ``Field Name | Data`` table, one ``NAME | 0x%08x``
line per field) with the fields the PPCC read is judged on (``value``, as OCI's health
check reads it), and records how it was called.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import gpu_read, probe, roce_cc
from nodetune.check.expect import expectations
from nodetune.check.model import Status
from nodetune.check.run import CheckOptions, judge
from tests.unit.test_check_probe import VARS, rig, script

NETDEV = "ens1f0np0"
NAME = f"fabric.roce_cc[{NETDEV}]"


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    """A RoCE node's stand-in tree and tools (test_check_probe's)."""
    return rig(tmp_path)


def mlxreg(node: Path, value: int | None = 1, *, rc: int = 0, hang: bool = False) -> Path:
    """A stand-in mlxreg; its arguments go to ``node``/mlxreg.args, one call per line."""
    calls = node / "mlxreg.args"
    table = ("Sending access register...\n\n"
             "Field Name        | Data\n" + "=" * 31 + "\n"
             "local_port        | 0x00000001\n"
             "cmd_type          | 0x00000003\n"
             "algo_slot         | 0x00000000\n"
             f"value             | 0x{value or 0:08x}\n" + "=" * 31 + "\n")
    body = f'echo "$*" >> {calls}\n'
    if hang:
        body += "sleep 60 &\nwait\n"
    elif rc:
        body += ('echo "-E- Failed to send access register: ME_REG_ACCESS_BAD_PARAM" >&2\n'
                 f"exit {rc}\n")
    else:
        body += f"cat <<'EOF'\n{table}EOF\n"
    script(node / "bin" / "mlxreg", body)
    return calls


def with_pci(node: Path) -> None:
    """The RDMA devices' PCI functions, linked as /sys/class/infiniband/DEV/device is."""
    sys_ = node / "node/sys"
    for dev, addr in (("mlx5_0", "0000:18:00.0"), ("mlx5_1", "0000:38:00.0")):
        function = sys_ / "devices/pci0000:00" / addr
        function.mkdir(parents=True)
        (sys_ / "class/infiniband" / dev / "device").symlink_to(function)


def checked(node: Path, *, ppcc: bool = False, timeout: float = 30,
            **vars_: Any) -> dict[str, Any]:
    """The real probe on the stand-in tree (``ppcc``: as check --read-ppcc asks), judged."""
    host = Host("gpu-1", ("gpu_nodes",), {**VARS, **vars_,
                                          "nodetune_python": str(node / "bin/python-with-torch")})
    exp = expectations(host)
    req = {**probe.request(exp, timeout=timeout, ppcc=ppcc), "root": str(node / "node")}
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True, text=True, check=True, timeout=90,
                         env={**os.environ, "PATH": f"{node / 'bin'}:{os.environ['PATH']}"})
    parsed = probe.parse("gpu-1", json.loads(out.stdout))
    return {r.name: r for r in judge(parsed, exp, gpu_read.read(parsed.nvidia))}


def test_dcqcn_on_passes_and_the_register_is_not_read_unless_asked(node: Path) -> None:
    calls = mlxreg(node)
    with_pci(node)
    results = checked(node)
    r = results[NAME]
    assert r.status is Status.PASS, r
    assert r.measured.startswith("roce_rp/3=1, roce_np/3=1, PPCC not read")
    assert r.expected == "DCQCN reaction and notification points on for priorities [3]"
    assert r.message == "PPCC not read (an access register read through mlxreg: --read-ppcc)"
    assert not calls.exists()  # mlxreg is on the node, and was not run
    assert results[f"fabric.roce[{NETDEV}]"].status is Status.PASS
    assert {n for n in results if n.startswith(roce_cc.NAME)} == {
        NAME, "fabric.roce_cc[ens2f0np0]"}


@pytest.mark.parametrize(("point", "words"), [
    ("roce_rp", "reaction point (roce_rp) priority 3 is 0"),
    ("roce_np", "notification point (roce_np) priority 3 is 0")])
def test_an_end_of_dcqcn_off_fails_here_and_not_in_fabric_roce(node: Path, point: str,
                                                               words: str) -> None:
    (node / f"node/sys/class/net/{NETDEV}/ecn/{point}/enable/3").write_text("0\n")
    results = checked(node)
    r = results[NAME]
    assert r.status is Status.FAIL, r
    assert r.message.startswith(f"{NETDEV}: DCQCN {words}: RoCE traffic there is not slowed")
    assert "`nodetune apply` restores it (roce_qos)" in r.message
    assert r.recommended.value == "re-run"
    assert results[f"fabric.roce[{NETDEV}]"].status is Status.PASS  # one cause, one check
    assert results["fabric.roce_cc[ens2f0np0]"].status is Status.PASS


def test_the_priorities_are_roce_qos_ones(node: Path) -> None:
    r = checked(node, roce_qos_ecn_priorities=[3, 4])[NAME]
    assert r.status is Status.FAIL  # priority 4 is off in the tree
    assert "reaction point (roce_rp) priority 4 is 0" in r.message
    assert "priority 3" not in r.message
    assert checked(node, roce_qos_ecn_priorities=[])[roce_cc.NAME].status is Status.SKIP
    skipped = checked(node, roce_qos_enabled=False)[roce_cc.NAME]
    assert skipped.status is Status.SKIP and "roce_qos_enabled is false" in skipped.message


def test_no_ecn_tree_is_a_skip_with_the_reason(node: Path) -> None:
    import shutil

    shutil.rmtree(node / f"node/sys/class/net/{NETDEV}/ecn")
    r = checked(node)[NAME]
    assert r.status is Status.SKIP, r
    assert f"{NETDEV} has no /sys/class/net/{NETDEV}/ecn/roce_{{rp,np}}/enable/" in r.message
    assert "inbox driver does not" in r.message


def test_half_the_tree_is_not_assessed_in_full(node: Path) -> None:
    (node / f"node/sys/class/net/{NETDEV}/ecn/roce_np/enable/3").unlink()
    r = checked(node)[NAME]
    assert r.status is Status.WARN and "not assessed in full" in r.message
    assert "roce_np/3" in r.message


def test_asked_the_register_is_read_with_a_get(node: Path) -> None:
    calls = mlxreg(node)
    with_pci(node)
    r = checked(node, ppcc=True)[NAME]
    assert r.status is Status.PASS, r
    assert r.measured.endswith("PPCC algo_slot 0 enabled (0x1)")
    asked = calls.read_text().splitlines()
    assert asked == [
        f"-d {addr} --reg_name PPCC --get --op cmd_type=0x3 --indexes "
        "local_port=1,pnat=0,lp_msb=0,algo_slot=0,algo_param_index=0"
        for addr in ("0000:18:00.0", "0000:38:00.0")]
    assert not any("--set" in a for a in asked)


def test_the_register_is_reported_never_judged(node: Path) -> None:
    """Which algorithm algo_slot 0 holds is the firmware's (OCI reads it as RTTCC): a slot
    reported off, or a register mlxreg cannot read, is said, and the verdict is DCQCN's
    enables in sysfs alone."""
    mlxreg(node, 0)
    with_pci(node)
    r = checked(node, ppcc=True)[NAME]
    assert r.status is Status.PASS, r
    assert r.message.startswith("PPCC algo_slot 0 disabled (0x0) (reported, not judged")
    mlxreg(node, rc=1)
    r = checked(node, ppcc=True)[NAME]
    assert r.status is Status.PASS, r
    assert ("mlxreg could not read PPCC (exit 1: -E- Failed to send access register: "
            "ME_REG_ACCESS_BAD_PARAM)") in r.message


def test_asked_without_mlxreg_says_so(node: Path) -> None:
    with_pci(node)
    r = checked(node, ppcc=True)[NAME]
    assert r.status is Status.PASS, r
    assert r.message == "PPCC not read: mlxreg (NVIDIA MFT) is not on the node's PATH"


def test_a_hung_mlxreg_is_not_assessed(node: Path) -> None:
    mlxreg(node, hang=True)
    with_pci(node)
    r = checked(node, ppcc=True, timeout=10)[NAME]  # each tool: 5 s
    assert r.status is Status.UNKNOWN, r
    assert r.message == ("could not be assessed: mlxreg PPCC: mlxreg gave no answer within "
                         "5 s (its process group was killed)")


def test_the_register_alone_never_passes_where_sysfs_has_no_tree(node: Path) -> None:
    import shutil

    shutil.rmtree(node / f"node/sys/class/net/{NETDEV}/ecn")
    mlxreg(node)
    with_pci(node)
    r = checked(node, ppcc=True)[NAME]
    assert r.status is Status.SKIP, r
    assert r.message.endswith("PPCC algo_slot 0 enabled (0x1)"), r


def test_a_node_roce_qos_does_not_configure_is_not_held_to_it(node: Path) -> None:
    """No mlnx_qos: roce_qos sets nothing there, so an enable that is off is not its drift
    (fabric.roce skips by the same rule)."""
    from nodetune.check import fabric, roce_cc
    from nodetune.check.expect import expectations
    exp = expectations(Host("n1", ("gpu_nodes",), {"roce_qos_enabled": True}))
    ports = [{"device": "mlx5_0", "port": "1", "link_layer": "Ethernet", "netdev": NETDEV,
              "state": "ACTIVE"}]
    roce = {"tool": None, "netdevs": {NETDEV: {"ecn": {"roce_rp/3": "0", "roce_np/3": "0"}}}}
    (r,) = roce_cc.judge(roce, ports, exp)
    (q,) = fabric.judge_roce(roce, ports, exp)
    assert r.status is q.status is Status.SKIP and r.message == q.message, (r, q)
    assert "mlnx_qos is not installed" in r.message


@pytest.mark.parametrize(("res", "read"), [
    ({"rc": 0, "stdout": "value | 0x00000001\n"}, (True, "PPCC algo_slot 0 enabled (0x1)")),
    ({"rc": 0, "stdout": "value   |   0x2\n"}, (False, "PPCC algo_slot 0 disabled (0x2)")),
    ({"rc": 0, "stdout": "no table\n"}, (None, "mlxreg could not read PPCC (exit 0: no table)")),
    ({"rc": 3, "stdout": "value | 0x1\n", "stderr": "-E- \x1b[31mbad\n"},
     (None, "mlxreg could not read PPCC (exit 3: -E- ?[31mbad)")),
])
def test_the_ppcc_answer_is_read_only_from_a_clean_exit(res: dict[str, Any],
                                                       read: tuple[Any, str]) -> None:
    assert roce_cc.ppcc_status(res) == read


def test_check_asks_for_the_register_only_with_the_option() -> None:
    assert CheckOptions().read_ppcc is False
    exp = expectations(Host("gpu-1", ("gpu_nodes",), {}))
    assert probe.request(exp, timeout=30)["ppcc"] is False
    assert probe.request(exp, timeout=30, ppcc=True)["ppcc"] is True


def test_the_option_reaches_the_run_and_its_record(tmp_path: Path) -> None:
    """`check --read-ppcc` on this machine (ansible_connection: local; no RoCE port here)."""
    import yaml

    from tests.conftest import run_nodetune

    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"here": {
        "ansible_connection": "local", "net_sysctl_enabled": False}}}}}}))
    runs = tmp_path / "runs"
    res = run_nodetune("check", str(inv), "--read-ppcc", "--skip-allreduce", "--json",
                       runs_dir=runs)
    assert res.code in (0, 5), res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["options"]["read_ppcc"] is True
    cc = next(c for c in doc["checks"]["here"] if c["name"] == roce_cc.NAME)
    assert cc["status"] == "skip"
    plain = run_nodetune("check", str(inv), "--skip-allreduce", "--json", runs_dir=runs)
    assert json.loads(plain.stdout)["options"]["read_ppcc"] is False
