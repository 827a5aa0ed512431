"""The node probe on a fake sysfs/proc tree, then every judge on what it read.

Faked at the hardware's edge only, and named so: a sysfs/proc tree of a RoCE
node, a stand-in `nvidia-smi` that prints the real 4x H200 capture, a stand-in
`mlnx_qos` that prints real `mlnx_qos -i` output, and a stand-in "python with
torch" that prints what torch 2.11.0+cu130 printed on that machine. The probe
itself runs for real, as it does on a node.
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
from nodetune.check import fabric, gpu_read, probe, software
from nodetune.check.expect import expectations
from nodetune.check.model import Status
from nodetune.check.run import judge
from tests.unit.test_roce_qos import MLNX_QOS_DSCP_PFC3

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x4"
TIMESYNC = FIX.parent / "timesync"
VARS: dict[str, Any] = {
    "nodetune_expected_gpus": 4,
    "nvidia_driver_version": "580.159.04-1",
    "nodetune_python": "/opt/venv/bin/python",  # replaced by the stand-in below
    "net_mtu_interfaces": [{"rdma": True, "mtu": 9000}],
    "net_sysctl_tcp_congestion_control": "cubic",
    "net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 262144 33554432"},
}
TORCH_2_11 = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl_available": True, "nccl": "2.28.9"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def roce_node(root: Path) -> Path:
    """A RoCE node's sysfs/proc tree: two 400G ports, ECN on priority 3, sysctls as asked."""
    sys_ = root / "sys"
    for dev, netdev in (("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0")):
        port = sys_ / "class/infiniband" / dev / "ports/1"
        write(port / "state", "4: ACTIVE")
        write(port / "phys_state", "5: LinkUp")
        write(port / "rate", "400 Gb/sec (4X NDR)")
        write(port / "link_layer", "Ethernet")
        write(port / "gid_attrs/ndevs/0", netdev)
        net = sys_ / "class/net" / netdev
        write(net / "mtu", "9000")
        write(net / "type", "1")
        write(net / "operstate", "up")
        (net / "device/infiniband" / dev).mkdir(parents=True)
        for point in ("roce_np", "roce_rp"):
            for prio in range(8):
                write(net / "ecn" / point / "enable" / str(prio), "1" if prio == 3 else "0")
        write(sys_ / "kernel/config/rdma_cm" / dev / "ports/1/default_roce_tos", "106")
    write(sys_ / "class/net/eth0/mtu", "1500")
    write(sys_ / "class/net/eth0/type", "1")
    for i in range(4):  # the GPUs on the PCI bus
        write(sys_ / f"bus/pci/devices/0000:00:0{6 + i}.0/vendor", "0x10de")
        write(sys_ / f"bus/pci/devices/0000:00:0{6 + i}.0/class", "0x030200")
    write(root / "proc/sys/net/ipv4/tcp_rmem", "4096\t262144\t33554432")
    write(root / "proc/sys/net/ipv4/tcp_congestion_control", "cubic")
    write(root / "proc/driver/nvidia/version",
          (FIX.parents[1] / "driver" / "proc-driver-nvidia-version-h100-x1.txt").read_text())
    (root / "dev/shm").mkdir(parents=True)
    return root


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    return rig(tmp_path)


def rig(tmp_path: Path) -> Path:
    """``tmp_path`` with a RoCE node's tree (node/) and the stand-in tools (bin/)."""
    roce_node(tmp_path / "node")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    script(bin_ / "nvidia-smi",  # stand-in: replays the real capture
           f'case "$1" in -q) cat {FIX}/nvidia-smi-q-x.xml;; nvlink) '
           f'cat {FIX}/nvidia-smi-nvlink-s.txt;; esac\n')
    qos = tmp_path / "mlnx_qos.txt"
    qos.write_text(MLNX_QOS_DSCP_PFC3)
    script(bin_ / "mlnx_qos", f'cat "${{MLNX_QOS_OUT:-{qos}}}"\n')  # stand-in, read-only
    torch = tmp_path / "torch.json"
    torch.write_text(json.dumps(TORCH_2_11))
    script(bin_ / "python-with-torch", f'cat "${{TORCH_OUT:-{torch}}}"\n')  # stand-in
    # stand-ins: a synchronised chronyd, an empty systemd manager environment
    script(bin_ / "chronyc", f'cat {TIMESYNC}/chronyc-c-tracking-synced.csv\n')
    script(bin_ / "systemctl", 'echo LANG=C.UTF-8\n')
    return tmp_path


def run_probe(node: Path, *, env: dict[str, str] | None = None,
              **vars_: Any) -> tuple[tuple[Any, ...], Any]:
    host = Host("gpu-1", ("gpu_nodes",), {**VARS, **vars_,
                                          "nodetune_python": str(node / "bin/python-with-torch")})
    exp = expectations(host)
    req = {**probe.request(exp, timeout=30), "root": str(node / "node")}
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True,
                         text=True, check=True, timeout=60,
                         env={**os.environ, "PATH": f"{node / 'bin'}:{os.environ['PATH']}",
                              **(env or {})})
    parsed = probe.parse("gpu-1", json.loads(out.stdout))
    return judge(parsed, exp, gpu_read.read(parsed.nvidia)), parsed


def by_name(results: tuple[Any, ...]) -> dict[str, Any]:
    return {r.name: r for r in results}


def test_a_healthy_roce_gpu_node_passes_every_check(node: Path) -> None:
    results, parsed = run_probe(node)
    bad = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
    assert not bad, bad
    names = by_name(results)
    for name in ("gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.pcie",
                 "gpu.clocks", "gpu.nvlink", "software.torch", "software.cuda", "software.nccl",
                 "software.shm", "fabric.rdma[mlx5_0/1]", "fabric.rdma[mlx5_1/1]",
                 "fabric.mtu[ens1f0np0]", "fabric.mtu[ens2f0np0]",
                 "fabric.sysctl[net.ipv4.tcp_rmem]",
                 "fabric.sysctl[net.ipv4.tcp_congestion_control]",
                 "fabric.roce[ens1f0np0]", "fabric.roce[ens2f0np0]", "node.time_sync",
                 "node.global_env"):
        assert names[name].status is Status.PASS, names[name]
    assert names["software.nccl"].measured == "NCCL 2.28.9"
    assert names["fabric.sysctl[net.ipv4.tcp_rmem]"].source == (
        "net_sysctl_settings_overrides (inventory)")
    # Keys of the role defaults the fake /proc lacks are skipped, as net_sysctl skips them.
    assert names["fabric.sysctl[net.core.rmem_max]"].status is Status.SKIP
    assert parsed.nvidia["pci_gpus"] == 4
    # The loaded module's flavour, read from /proc/driver/nvidia/version.
    assert names["gpu.driver"].measured == "580.159.04 open"


def test_mtu_drift_names_the_interface(node: Path) -> None:
    write(node / "node/sys/class/net/ens2f0np0/mtu", "1500")
    r = by_name(run_probe(node)[0])["fabric.mtu[ens2f0np0]"]
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("1500", "9000")
    assert "ens2f0np0 MTU is 1500, apply sets 9000" in r.message
    assert r.source == "net_mtu_interfaces (inventory)"


def test_sysctl_drift_names_the_key(node: Path) -> None:
    write(node / "node/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456")
    r = by_name(run_probe(node)[0])["fabric.sysctl[net.ipv4.tcp_rmem]"]
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("4096 131072 6291456", "4096 262144 33554432")


def test_a_required_sysctl_the_node_lacks_fails(node: Path) -> None:
    results, _ = run_probe(node, net_sysctl_required=["net.core.rmem_max"])
    assert by_name(results)["fabric.sysctl[net.core.rmem_max]"].status is Status.FAIL


@pytest.mark.parametrize(("file", "value", "words"), [
    ("state", "1: DOWN", "port state 1: DOWN"),
    ("phys_state", "3: Disabled", "physical state 3: Disabled"),
    ("rate", "200 Gb/sec (4X HDR)", "rate 200 Gb/s below 400"),
])
def test_rdma_port_down_or_at_half_rate_fails(node: Path, file: str, value: str,
                                              words: str) -> None:
    write(node / "node/sys/class/infiniband/mlx5_1/ports/1" / file, value)
    r = by_name(run_probe(node)[0])["fabric.rdma[mlx5_1/1]"]
    assert r.status is Status.FAIL and words in r.message and "(ens2f0np0)" in r.message


def test_rdma_rate_from_the_inventory(node: Path) -> None:
    results, _ = run_probe(node, nodetune_expected_rdma_rate_gbps=800)
    r = by_name(results)["fabric.rdma[mlx5_0/1]"]
    assert r.status is Status.FAIL and r.source == "nodetune_expected_rdma_rate_gbps"


def test_roce_drift_fails(node: Path, tmp_path: Path) -> None:
    write(node / "node/sys/class/net/ens1f0np0/ecn/roce_np/enable/3", "0")
    write(node / "node/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos", "0")
    pcp = tmp_path / "pcp.txt"
    pcp.write_text(MLNX_QOS_DSCP_PFC3.replace("trust state: dscp", "trust state: pcp")
                   .replace("0   0   0   1   0", "0   0   0   0   0"))
    results, _ = run_probe(node, env={"MLNX_QOS_OUT": str(pcp)})
    r = by_name(results)["fabric.roce[ens1f0np0]"]
    assert r.status is Status.FAIL
    for words in ("trust pcp (want dscp)", "pfc 0,0,0,0,0,0,0,0 (want 0,0,0,1,0,0,0,0)",
                  "RDMA-CM ToS 0 (want 106)"):
        assert words in r.message
    assert "ECN" not in r.message  # the ECN enables are fabric.roce_cc's (one cause, one check)
    cc = by_name(results)["fabric.roce_cc[ens1f0np0]"]
    assert cc.status is Status.FAIL and "notification point (roce_np) priority 3 is 0" in \
        cc.message


@pytest.mark.parametrize(("torch", "check", "status", "words"), [
    ({**TORCH_2_11, "cuda": None, "nccl_available": False, "nccl": None}, "software.cuda",
     Status.FAIL, "CPU build on a node with 4 GPU(s)"),
    ({**TORCH_2_11, "cuda": "14.0"}, "software.cuda", Status.FAIL, "supports up to 13.0"),
    ({**TORCH_2_11, "cuda": "13.1"}, "software.cuda", Status.WARN, "minor-version"),
    ({**TORCH_2_11, "nccl_available": False}, "software.nccl", Status.FAIL, "no usable NCCL"),
    ({"error": "ModuleNotFoundError: No module named 'torch'"}, "software.torch", Status.FAIL,
     "cannot import torch"),
])
def test_software_misalignment_fails(node: Path, tmp_path: Path, torch: dict[str, Any],
                                     check: str, status: Status, words: str) -> None:
    out = tmp_path / "other-torch.json"
    out.write_text(json.dumps(torch))
    r = by_name(run_probe(node, env={"TORCH_OUT": str(out)})[0])[check]
    assert r.status is status and words in r.message, r


def test_gpu_node_without_driver_fails_the_count(node: Path) -> None:
    (node / "bin/nvidia-smi").unlink()
    results = by_name(run_probe(node)[0])
    assert results["gpu.count"].status is Status.FAIL
    assert "4 NVIDIA GPU(s) on the PCI bus but no nvidia-smi" in results["gpu.count"].message
    assert results["gpu.ecc"].status is Status.SKIP


def test_the_probe_reads_the_bus_with_node_facts_own_script(node: Path) -> None:
    """One reader of the PCI bus, the RDMA ports and the interfaces: the probe carries the
    fact script, so an NVIDIA function that is not a GPU (HDMI audio, class 0x0403) counts
    for neither, and an extra GPU on the bus counts for both."""
    fact = (Path(probe.__file__).parents[2] / "roles/node_facts/files/nodetune.fact").read_text()
    assert repr(fact) in probe.source()
    write(node / "node/sys/bus/pci/devices/0000:00:06.1/vendor", "0x10de")
    write(node / "node/sys/bus/pci/devices/0000:00:06.1/class", "0x040300")
    assert run_probe(node)[1].nvidia["pci_gpus"] == 4
    write(node / "node/sys/bus/pci/devices/0000:00:0a.0/vendor", "0x10de")
    write(node / "node/sys/bus/pci/devices/0000:00:0a.0/class", "0x030200")
    parsed = run_probe(node)[1]
    assert parsed.nvidia["pci_gpus"] == 5
    assert [(p["device"], p["netdev"]) for p in parsed.rdma][:1] == [("mlx5_0", "ens1f0np0")]
    assert {name: (i["mtu"], i["rdma"]) for name, i in parsed.interfaces.items()} == {
        "eth0": (1500, False), "ens1f0np0": (9000, True), "ens2f0np0": (9000, True)}


def test_small_shm_fails() -> None:
    exp = expectations(Host("n", (), {}))
    r = software.judge_shm({"bytes": 64 << 20, "free": 64 << 20}, exp)
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("64.0 MiB free of 64.0 MiB", ">= 1.0 GiB free")
    assert "NCCL troubleshooting" in r.source
    ok = software.judge_shm({"bytes": 64 << 20, "free": 64 << 20}, expectations(Host("n", (), {
        "nodetune_min_shm": "64M"})))
    assert ok.status is Status.PASS and ok.source == "nodetune_min_shm"


@pytest.mark.parametrize("free", [0, (1 << 30) - 4096])
def test_a_large_but_full_shm_fails(free: int) -> None:
    """512 GiB as on the H200 machine (fixtures/h200-x4), but nothing (or too little) free."""
    r = software.judge_shm({"bytes": 512 << 30, "free": free}, expectations(Host("n", (), {})))
    assert r.status is Status.FAIL, r
    assert r.measured.endswith("free of 512.0 GiB") and "remove what fills it" in r.message


def test_shm_without_free_space_reported_fails() -> None:
    r = software.judge_shm({"bytes": 512 << 30}, expectations(Host("n", (), {})))
    assert r.status is Status.FAIL and r.measured == "absent"


def test_the_probe_reports_free_space_of_shm(node: Path) -> None:
    _results, parsed = run_probe(node)
    st = os.statvfs(node / "node" / "dev/shm")
    assert parsed.shm["bytes"] == st.f_blocks * st.f_frsize
    # Other writers share that file system: free space is only bounded here.
    assert 0 < parsed.shm["free"] <= parsed.shm["bytes"]


def test_connection_interface_is_left_alone_like_net_mtu_does() -> None:
    exp = expectations(Host("n", (), {"net_mtu_interfaces": [{"name": "eth0", "mtu": 9000}]}))
    ifaces = {"eth0": {"mtu": "1500", "ipv4": "10.0.0.5"}}
    assert fabric.judge_mtu(ifaces, ("10.0.0.5",), exp)[0].status is Status.SKIP
    assert fabric.judge_mtu(ifaces, (), exp)[0].status is Status.FAIL


def test_torch_is_imported_beside_the_other_reads(node: Path, tmp_path: Path) -> None:
    """The stand-in torch waits for the stand-in nvidia-smi to have run, and nvidia-smi
    notes whether torch's import had already started: only a probe that starts the
    import first and reads beside it sees both (a sequential one would time out)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script(node / "bin/python-with-torch",
           f'touch {marks}/torch-started\n'
           f'i=0; while [ ! -e {marks}/smi-done ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n'
           f'[ -e {marks}/smi-done ] || exit 9\n'
           f'cat {tmp_path}/torch.json\n')
    script(node / "bin/nvidia-smi",
           f'i=0; while [ ! -e {marks}/torch-started ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n'
           f'[ -e {marks}/torch-started ] && touch {marks}/smi-saw-torch\n'
           f'touch {marks}/smi-done\n'
           f'case "$1" in -q) cat {FIX}/nvidia-smi-q-x.xml;; nvlink) '
           f'cat {FIX}/nvidia-smi-nvlink-s.txt;; esac\n')
    results, parsed = run_probe(node)
    assert (marks / "smi-saw-torch").exists()
    assert parsed.torch == TORCH_2_11
    assert by_name(results)["software.torch"].status is Status.PASS


def test_a_torch_import_that_fails_is_named(node: Path, tmp_path: Path) -> None:
    script(node / "bin/python-with-torch", 'echo "ModuleNotFoundError: torch" >&2; exit 1\n')
    results, parsed = run_probe(node)
    assert parsed.torch == {"error": "exit 1: ModuleNotFoundError: torch"}
    assert by_name(results)["software.torch"].status is Status.FAIL


def test_torch_is_read_in_the_workers_environment(node: Path, tmp_path: Path) -> None:
    """nodetune_env (PYTHONPATH, LD_LIBRARY_PATH ...) reaches torch's import in the probe, as
    it reaches validate's workers: the stand-in torch answers what that environment says."""
    from nodetune.measure.host_env import host_env

    other = tmp_path / "torch-2.10.json"
    other.write_text(json.dumps({**TORCH_2_11, "torch": "2.10.0+cu128", "nccl": "2.27.5"}))
    host = Host("gpu-1", ("gpu_nodes",), {**VARS, "nodetune_env": {"TORCH_OUT": str(other)},
                                          "nodetune_python": str(node / "bin/python-with-torch")})
    exp = expectations(host)
    req = {**probe.request(exp, timeout=30, env=host_env(host)), "root": str(node / "node")}
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PATH": f"{node / 'bin'}:{os.environ['PATH']}"})
    parsed = probe.parse("gpu-1", json.loads(out.stdout))
    assert parsed.torch is not None and parsed.torch["torch"] == "2.10.0+cu128"
