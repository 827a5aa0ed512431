"""Bad inputs to the network roles fail before anything changes, naming the variable.

Each case runs one role against localhost (local connection, check mode).
The roles check inputs first, from variables alone; the cases that need a
node read point the role's private sysfs/procfs roots at a temporary
directory, so this machine is neither changed nor read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins import collections_path

ROOT = Path(__file__).resolve().parents[2]
# The ansible-core of the Python running the tests (the suite runs on two lines).
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def _fake_proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc-sys"
    for key, value in {
        "net.ipv4.tcp_available_congestion_control": "reno cubic",
        "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
        "net.core.rmem_max": "212992",
    }.items():
        file = root.joinpath(*key.split("."))
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(value + "\n")
    return root


def _run(role: str, extra: dict[str, object], tmp_path: Path,
         *args: str, env_: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(f"- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: {role}\n")
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra}))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": collections_path(),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        **(env_ or {}),
    }
    return subprocess.run(
        [
            str(PLAYBOOK),
            "-i",
            "localhost,",
            "-c",
            "local",
            "--check",
            str(play),
            "-e",
            f"@{extra_file}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


CASES = {
    "tcp_rmem not three integers": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 87380"}},
        "net_sysctl_settings['net.ipv4.tcp_rmem'] must be three ascending integers",
    ),
    "tcp_wmem not ascending": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.ipv4.tcp_wmem": "4096 65536 1024"}},
        "net_sysctl_settings['net.ipv4.tcp_wmem'] must be three ascending integers",
    ),
    "MTU 100000": (
        "net_mtu",
        {"net_mtu_interfaces": [{"name": "ens1f0np0", "mtu": 100000}]},
        'net_mtu_interfaces[0]: needs "mtu"',
    ),
    "interface name that would add udev keys": (
        "net_mtu",
        {"net_mtu_interfaces": [{"name": 'q",NAME="pwn', "mtu": 9000}]},
        "a name has only",
    ),
    "sysctl value with a line break": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.core.rmem_max": "1\nkernel.core_pattern = |/bin/sh"}},
        "values must be non-empty single-line",
    ),
    "roce_qos interface with shell characters": (
        "roce_qos",
        {"roce_qos_interfaces": ["eth0;reboot"]},
        "roce_qos_interfaces must be interface names",
    ),
    "PFC priority 9": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [9], "roce_qos_ecn_priorities": []},
        "roce_qos_pfc_priorities must be distinct priorities 0-7",
    ),
    "ECN on a priority without PFC": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [3], "roce_qos_ecn_priorities": [4]},
        "roce_qos_ecn_priorities [4] must be priorities 0-7 that are also in",
    ),
    "two lossless priorities not allowed": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [3, 4]},
        "roce_qos_pfc_priorities has 2 lossless priorities",
    ),
    "NCCL_IB_TC out of range": (
        "nccl_config",
        {"nccl_config_ib_tc": 300},
        "nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_in_the_assert_step(case: str, tmp_path: Path) -> None:
    role, extra, message = CASES[case]
    result = _run(role, extra, tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert message in out, out
    assert "changed=0" in out, out
    # Failed in one of the role's "Check ..." input tasks, before any probe.
    failed_task = out.split("fatal:")[0].rsplit("TASK [", 1)[1].split("]")[0]
    assert failed_task.startswith(f"{role} : Check"), failed_task


def test_unknown_congestion_control_lists_available(tmp_path: Path) -> None:
    result = _run(
        "net_sysctl",
        {
            "net_sysctl_tcp_congestion_control": "vegas2",
            "__net_sysctl_proc_root": str(_fake_proc(tmp_path)),
            "__net_sysctl_modules_root": str(tmp_path / "no-modules"),
        },
        tmp_path,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert (
        "net_sysctl_tcp_congestion_control: 'vegas2' is not available on this node; available: reno, cubic"
        in out
    ), out
    assert "changed=0" in out, out


def test_required_key_missing_fails_naming_it(tmp_path: Path) -> None:
    result = _run(
        "net_sysctl",
        {
            "net_sysctl_required": ["net.core.netdev_max_backlog"],
            "net_sysctl_tcp_congestion_control": "cubic",
            "__net_sysctl_proc_root": str(_fake_proc(tmp_path)),
        },
        tmp_path,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert (
        "net_sysctl_required: key(s) net.core.netdev_max_backlog cannot be set on this node" in out
    ), out


def test_keys_this_node_lacks_are_skipped_and_named(tmp_path: Path) -> None:
    # The fake /proc/sys has three keys; the role's defaults ask for more. Check mode:
    # the probe's warning names what it skips, and the run goes on.
    result = _run(
        "net_sysctl",
        {
            "net_sysctl_tcp_congestion_control": "cubic",
            "__net_sysctl_proc_root": str(_fake_proc(tmp_path)),
            "net_sysctl_file": str(tmp_path / "90-net.conf"),
            "__net_sysctl_modules_load_file": str(tmp_path / "modules-load.conf"),
        },
        tmp_path,
    )
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0, out
    assert "[WARNING]: Skipping what this node cannot set." in out, out
    assert "net.core.wmem_max" in out.split("Skipping what this node cannot set.")[1], out


@pytest.mark.parametrize(("extra", "warned"), [
    ({"roce_qos_rdma_cm_tos": 32}, "WARNING: ToS 32 (roce_qos_rdma_cm_tos) maps to priority 1"),
    ({}, None),
])
def test_roce_qos_warns_when_rdma_traffic_misses_the_lossless_priority(
        tmp_path: Path, extra: dict[str, object], warned: str | None) -> None:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    result = _run("roce_qos", {**extra, "__roce_qos_sysfs_root": str(sysfs),
                               "__roce_qos_mlnx_qos": "nodetune-no-such-mlnx-qos"}, tmp_path)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0, out
    if warned:
        assert warned in out and "not in roce_qos_pfc_priorities [3]" in out, out
    else:
        assert "WARNING: ToS" not in out, out


@pytest.mark.parametrize(("extra", "warned"), [
    ({"nccl_config_extra": {"NCCL_NOT_A_REAL_KNOB": "1"}}, "NCCL_NOT_A_REAL_KNOB"),
    ({}, None),
])
def test_nccl_config_warns_about_variables_it_does_not_know(
        tmp_path: Path, extra: dict[str, object], warned: str | None) -> None:
    result = _run("nccl_config", {**extra, "nccl_config_path": str(tmp_path / "nccl.conf")},
                  tmp_path)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0, out
    if warned:
        assert '"msg": "WARNING: ' in out and warned in out.split("WARNING: ", 1)[1], out
    else:
        assert "WARNING: " not in out.replace("[WARNING]", ""), out


def _changed_tasks(out: str) -> list[str]:
    """The tasks that reported a change (in check mode: would change)."""
    return [block.split("]", 1)[0] for block in out.split("TASK [")[1:]
            if "changed: [localhost]" in block]


def test_roce_qos_without_hardware_reports_and_skips(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    result = _run(
        "roce_qos",
        {
            "__roce_qos_sysfs_root": str(sysfs),
            "__roce_qos_configfs_root": str(tmp_path / "configfs"),
            "__roce_qos_mlnx_qos": "nodetune-no-such-mlnx-qos",
        },
        tmp_path,
        env_={"NODETUNE_FACTS_SYSFS": str(sysfs)},  # node_facts reads the same tree
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Skipping RoCE QoS: no Mellanox/NVIDIA NIC (PCI 15b3)" in out, out
    assert "mlnx_qos -i IF --pfc 0,0,0,1,0,0,0,0" in out, out
    # Used alone, the role includes node_facts (whose install is the one predicted
    # change) and changes nothing of its own.
    assert _changed_tasks(out) == ["node_facts : Install and gather the nodetune local fact"], out


@pytest.mark.parametrize("tags", [[], ["--tags", "nccl_config"]])
def test_roce_qos_forced_without_the_vendor_tool_fails_naming_it(tmp_path: Path,
                                                                tags: list[str]) -> None:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    result = _run(
        "roce_qos",
        {
            "roce_qos_force": True,
            "__roce_qos_sysfs_root": str(sysfs),
            "__roce_qos_configfs_root": str(tmp_path / "configfs"),
            "__roce_qos_mlnx_qos": "nodetune-no-such-mlnx-qos",
        },
        tmp_path,
        *tags,
        env_={"NODETUNE_FACTS_SYSFS": str(sysfs)},
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "roce_qos_force is true but nodetune-no-such-mlnx-qos is not installed" in out, out
    assert _changed_tasks(out) == ["node_facts : Install and gather the nodetune local fact"], out


def test_nccl_config_with_nothing_set_and_no_file_is_a_no_op(tmp_path: Path) -> None:
    # Regression: removing the managed block from a missing /etc/nccl.conf failed.
    target = tmp_path / "nccl.conf"
    proc = _run("nccl_config", {"nccl_config_path": str(target)}, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout
    assert not target.exists()


FACTS = {"os_family": "Debian", "distribution_major_version": "4", "distribution_version": "4",
         "distribution_release": "x", "architecture": "x86_64"}


def test_ofed_on_an_unsupported_os_says_so(tmp_path: Path) -> None:
    facts = {**FACTS, "distribution": "Plan9", "os_family": "Plan9"}
    out = _run("ofed", {"ansible_facts": facts}, tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "ofed: unsupported OS Plan9 (Plan9 family)" in text, text


def test_ofed_on_ubuntu_takes_the_debian_family_vars(tmp_path: Path) -> None:
    out = _run("ofed", {"ansible_facts": {**FACTS, "distribution": "Ubuntu"}}, tmp_path)
    text = out.stdout + out.stderr
    assert "TASK [ofed : Check the role's inputs]" in text, text
    assert "unsupported OS" not in text, text


def test_a_role_param_of_your_own_playbook_is_checked_after_the_inputs_pass(
        tmp_path: Path) -> None:
    # inputs.yml checked net_mtu on the inventory's values (none set: fine); the play
    # after it gives the role a parameter that pass never saw. nodetune's own plays
    # let a role skip checks the pass ran; a playbook of your own must not.
    bad = 'q",NAME="pwn'
    play = tmp_path / "own.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT}/playbooks/inputs.yml\n"
        "  vars: {nodetune_input_roles: [net_mtu]}\n"
        "- hosts: localhost\n  gather_facts: false\n  roles:\n"
        f"    - role: net_mtu\n      vars: {{net_mtu_interfaces: [{{name: '{bad}', mtu: 9000}}]}}\n")
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_COLLECTIONS_PATH": collections_path(), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_RETRY_FILES_ENABLED": "false"}
    result = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", "-c", "local", "--check", str(play),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", "nodetune_hosts=localhost"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    out = result.stdout + result.stderr
    # The pass ran (its one task checks every selected role's "validate" entry point).
    assert "TASK [Check every selected role's variables against its argument spec]" in out, out
    assert result.returncode != 0 and "a name has only" in out, out
    failed_task = out.split("fatal:")[0].rsplit("TASK [", 1)[1].split("]")[0]
    assert failed_task.startswith("net_mtu : Check"), failed_task
