"""On a node Slurm has allocated (nodetune_busy_hosts), the roles skip what would
disturb its jobs and list it; an idle node gets it as before.

Real ansible-runner and the roles' own task files and handlers, on this machine
(connection local). No systemd and no GPU here: systemctl and modprobe are
STAND-INs on PATH that log what they are asked (the modprobe module prefers
/usr/sbin and /sbin: where a real modprobe is there, it refuses the missing
module and the idle node's load fails, which shows as much), and the driver's
registered probes are given as -e.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from nodetune.ansible.results import PlaybookOptions
from nodetune.ansible.runner import run_playbook


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    # Every unit is loaded and stopped: a start is a change.
    systemctl.write_text(
        f'#!/bin/sh\necho "$STANDIN_HOST systemctl $*" >> {log}\n'
        'case "$1" in\n'
        '  show) printf "Id=%s.service\\nLoadState=loaded\\nActiveState=inactive\\n'
        'SubState=dead\\nUnitFileState=enabled\\n" "$2";;\n'
        "  is-enabled) echo enabled;;\n"
        "esac\nexit 0\n")
    systemctl.chmod(0o755)
    modprobe = bin_dir / "modprobe"
    modprobe.write_text(f'#!/bin/sh\necho "$STANDIN_HOST modprobe $*" >> {log}\n')
    modprobe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    inv = tmp_path / "hosts.ini"
    py = sys.executable
    inv.write_text("[gpu_nodes]\n"
                   f"idle ansible_connection=local ansible_python_interpreter={py}\n"
                   f"busy ansible_connection=local ansible_python_interpreter={py}\n")
    return inv, log


def _calls(log: Path, what: str) -> list[str]:
    return sorted(line for line in (log.read_text().splitlines() if log.exists() else [])
                  if what in line)


DRIVER_PLAY = """\
- hosts: gpu_nodes
  gather_facts: false
  environment:
    STANDIN_HOST: "{{ inventory_hostname }}"
  tasks:
    - name: A new driver that needs a reboot (stand-in)
      ansible.builtin.set_fact:
        nvidia_driver_reboot_required: true
        nvidia_driver_reboot_reason: driver 580.95.05 installed
        ofed_reboot_required: true
        ofed_reboot_reason: DOCA-OFED 3.1.0 installed
      changed_when: true
      notify: [Reboot for the NVIDIA driver, Reboot for new RDMA kernel modules]
    - ansible.builtin.import_role:
        name: nodetune.cluster.nvidia_driver
        tasks_from: persistenced.yml
        rolespec_validate: false
    - ansible.builtin.import_role:
        name: nodetune.cluster.nvidia_driver
        tasks_from: peermem.yml
        rolespec_validate: false
    - ansible.builtin.import_role:
        name: nodetune.cluster.ofed
        tasks_from: reboot.yml
        rolespec_validate: false
      vars:
        ofed_source: inbox
- ansible.builtin.import_playbook: {report}
"""


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check-mode"])
def test_driver_starts_loads_and_reboots_wait_on_a_busy_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: bool) -> None:
    from nodetune.ansible.content import content_dir

    inv, log = _site(tmp_path, monkeypatch)
    play = tmp_path / "play.yml"
    play.write_text(DRIVER_PLAY.replace(
        "{report}", str(content_dir() / "playbooks" / "report.yml")))
    given = {
        "nodetune_busy_hosts": ["busy"],
        "nvidia_driver_reboot_ok": True, "ofed_reboot_ok": True,
        # The driver is loaded (stand-ins for the role's registered probes).
        "__nvidia_driver_proc_version": {"stat": {"exists": True}},
        "__nvidia_driver_probe": {"module_version": "580.95.05"},
        "__nvidia_driver_install": {"changed": False},
        "nvidia_driver_gpu_present": True, "nvidia_driver_userspace_only": False,
        "__nvidia_driver_peermem_needed": True,
        "__nvidia_driver_modules_load_dir": f"{tmp_path}/modules-load.d/{{{{ inventory_hostname }}}}",
    }
    for host in ("idle", "busy"):
        (tmp_path / "modules-load.d" / host).mkdir(parents=True)
    result = run_playbook(str(play), inv, options=PlaybookOptions(
        check=check, extra_vars=(json.dumps(given),)), artifact_dir=tmp_path / "run")
    deferred = result.custom_stats.get("nodetune_deferred")
    assert deferred == {"busy": [
        "nvidia_driver: start nvidia-persistenced",
        "nvidia_driver: load module nvidia_peermem",
        "nvidia_driver: reboot (driver 580.95.05 installed)",
        "ofed: reboot (DOCA-OFED 3.1.0 installed)"]}, result.failed_tasks
    # The busy node's service was never started, even in check mode's prediction;
    # its boot-time file still lands (outside check mode).
    starts = _calls(log, "systemctl start")
    assert starts == ([] if check else ["idle systemctl start nvidia-persistenced"])
    assert not [line for line in _calls(log, "systemctl") if line.startswith("busy")
                and line.split()[2] not in ("show", "is-enabled", "enable")]
    assert (tmp_path / "modules-load.d" / "busy" / "nodetune-nvidia-peermem.conf"
            ).exists() is not check
    # The idle node loaded the module (or tried: a real modprobe refuses it); the busy
    # one did not try.
    failed = {(t.host, t.task) for t in result.failed_tasks}
    loads = _calls(log, "modprobe")
    assert not [line for line in loads if line.startswith("busy")]
    assert ("busy", "Load nvidia-peermem now") not in failed
    if check:
        assert not loads and not failed
    else:
        assert loads == ["idle modprobe -- nvidia_peermem"] or failed == {
            ("idle", "Load nvidia-peermem now")}


NETWORK_PLAY = """\
- hosts: gpu_nodes
  gather_facts: false
  environment:
    STANDIN_HOST: "{{ inventory_hostname }}"
    MLNX_QOS_STANDIN_STATE: "{{ standin_root }}/mlnx_qos/{{ inventory_hostname }}"
    MLNX_QOS_STANDIN_LOG: "{{ standin_root }}/mlnx_qos.log"
  tasks:
    - ansible.builtin.import_role:
        name: nodetune.cluster.net_mtu
        tasks_from: live.yml
        rolespec_validate: false
    - ansible.builtin.import_role:
        name: nodetune.cluster.net_mtu
        tasks_from: persist.yml
        rolespec_validate: false
    - ansible.builtin.import_role:
        name: nodetune.cluster.roce_qos
        tasks_from: configure.yml
        rolespec_validate: false
- ansible.builtin.import_playbook: {report}
"""


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check-mode"])
def test_live_mtu_and_qos_changes_wait_on_a_busy_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: bool) -> None:
    """net_mtu and roce_qos on a busy node: the persistent MTU (udev rules) is written,
    no live MTU, trust/PFC, ECN or ToS change is made, and each is listed. The NICs are
    STAND-INs: a sysfs/configfs tree per host, an `ip` that logs and writes the MTU into
    it, and the molecule scenario's mlnx_qos stand-in."""
    from nodetune.ansible.content import content_dir

    inv, log = _site(tmp_path, monkeypatch)
    bin_dir = tmp_path / "bin"
    ip = bin_dir / "ip"
    ip.write_text(f'#!/bin/sh\necho "$STANDIN_HOST ip $*" >> {log}\n'
                  '[ "$1 $2 $3" = "link set dev" ] && [ "$5" = mtu ] && '
                  f'echo "$6" > {tmp_path}/sys/"$STANDIN_HOST"/class/net/"$4"/mtu\nexit 0\n')
    ip.chmod(0o755)
    mlnx_qos = bin_dir / "mlnx_qos"
    mlnx_qos.write_text((Path(__file__).resolve().parents[2] / "molecule" / "roce_qos"
                         / "mlnx_qos-standin.sh").read_text())
    mlnx_qos.chmod(0o755)
    for host in ("idle", "busy"):
        net = tmp_path / "sys" / host / "class" / "net" / "ens1f0np0"
        net.mkdir(parents=True)
        (net / "mtu").write_text("1500\n")
        (net / "type").write_text("1\n")
        for point in ("roce_np", "roce_rp"):
            (net / "ecn" / point / "enable").mkdir(parents=True)
            for prio in range(8):
                (net / "ecn" / point / "enable" / str(prio)).write_text("0\n")
        (tmp_path / "cfg" / host / "rdma_cm").mkdir(parents=True)
    play = tmp_path / "play.yml"
    play.write_text(NETWORK_PLAY.replace(
        "{report}", str(content_dir() / "playbooks" / "report.yml")))
    per_host = "{{ inventory_hostname }}"
    given = {
        "nodetune_busy_hosts": ["busy"], "standin_root": str(tmp_path),
        "net_mtu_interfaces": [{"name": "ens1f0np0", "mtu": 9000}],
        "net_mtu_network_manager": "udev",
        "__net_mtu_sysfs_root": f"{tmp_path}/sys/{per_host}",
        "__net_mtu_udev_rules": f"{tmp_path}/udev/{per_host}/90-nodetune-mtu.rules",
        "__roce_qos_ports": [{"dev": "mlx5_0", "port": 1, "netdev": "ens1f0np0"}],
        "__roce_qos_tool_path": str(mlnx_qos), "roce_qos_persist": False,
        "__roce_qos_sysfs_root": f"{tmp_path}/sys/{per_host}",
        "__roce_qos_configfs_root": f"{tmp_path}/cfg/{per_host}",
    }
    result = run_playbook(str(play), inv, options=PlaybookOptions(
        check=check, extra_vars=(json.dumps(given),)), artifact_dir=tmp_path / "run")
    assert not result.failed_tasks, result.failed_tasks
    sysfs = f"{tmp_path}/sys/busy/class/net/ens1f0np0/ecn"
    assert result.custom_stats.get("nodetune_deferred") == {"busy": [
        "net_mtu: ens1f0np0 MTU 1500 → 9000 (live change at the next apply on an idle node"
        " or reboot)",
        "roce_qos: ens1f0np0 trust pcp → dscp, PFC 0,0,0,0,0,0,0,0 → 0,0,0,1,0,0,0,0"
        " (live change at the next apply on an idle node or reboot)",
        f"roce_qos: {sysfs}/roce_np/enable/3 0 → 1 (live change at the next apply on an"
        " idle node or reboot)",
        f"roce_qos: {sysfs}/roce_rp/enable/3 0 → 1 (live change at the next apply on an"
        " idle node or reboot)",
        f"roce_qos: {tmp_path}/cfg/busy/rdma_cm/mlx5_0/ports/1/default_roce_tos (absent)"
        " → 106 (live change at the next apply on an idle node or reboot)"]}
    # Nothing live changed on the busy node; the idle one changed (outside check mode).
    assert not [line for line in _calls(log, " ip ") if line.startswith("busy")]
    assert _calls(log, "ip link") == ([] if check else ["idle ip link set dev ens1f0np0 mtu 9000"])
    requests = (tmp_path / "mlnx_qos.log")
    assert (requests.read_text().splitlines() if requests.exists() else []) == (
        [] if check else ["ens1f0np0 --trust dscp", "ens1f0np0 --pfc 0,0,0,1,0,0,0,0"])
    for host, changed in (("busy", False), ("idle", not check)):
        net = tmp_path / "sys" / host / "class" / "net" / "ens1f0np0"
        assert (net / "mtu").read_text().strip() == ("9000" if changed else "1500")
        assert (net / "ecn" / "roce_np" / "enable" / "3").read_text().strip() == (
            "1" if changed else "0")
        assert (tmp_path / "cfg" / host / "rdma_cm" / "mlx5_0").exists() is changed
        # The MTU persists on both (the busy node's at its next boot), outside check mode.
        rules = tmp_path / "udev" / host / "90-nodetune-mtu.rules"
        assert rules.exists() is not check
        if not check:
            assert 'KERNEL=="ens1f0np0", ATTR{mtu}="9000"' in rules.read_text()
