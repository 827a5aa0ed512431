"""Tests for the roce_qos role's filter plugin and the state planning its module uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]

# `mlnx_qos -i eth4` output as published in att/netarbiter
# (nvmf/OUTPUTSAMPLE.setup-nic-lossless-layer3.sh.md), trimmed to what the
# parser reads plus the surrounding table.
MLNX_QOS_DSCP_PFC3 = """\
DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
        prio:0 dscp:07,06,05,04,03,02,01,00,
        prio:3 dscp:31,30,29,28,27,26,25,24,
Cable len: 7
PFC configuration:
        priority    0   1   2   3   4   5   6   7
        enabled     0   0   0   1   0   0   0   0{trailing}
tc: 0 ratelimit: unlimited, tsa: vendor
         priority:  1
tc: 3 ratelimit: unlimited, tsa: vendor
         priority:  3
""".format(trailing="   ")  # the tool pads the enabled row with spaces

MLNX_QOS_PCP_NONE = """\
DCBX mode: OS controlled
Priority trust state: pcp
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     0   0   0   0   0   0   0   0
"""




mod = load_plugin("plugins/filter/roce_qos.py")
qos = load_plugin("plugins/module_utils/roce_qos.py")


def test_parse_real_output() -> None:
    assert qos.parse(MLNX_QOS_DSCP_PFC3) == {
        "trust": "dscp",
        "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
    }
    assert qos.parse(MLNX_QOS_PCP_NONE) == {"trust": "pcp", "pfc": [0] * 8}


def test_parse_unknown_output() -> None:
    assert qos.parse("garbage") == {"trust": None, "pfc": None}


def test_commands_nothing_when_state_matches() -> None:
    assert qos.mlnx_commands(MLNX_QOS_DSCP_PFC3, "eth4", "dscp", [3]) == []


def test_commands_set_only_what_differs() -> None:
    assert qos.mlnx_commands(
        MLNX_QOS_PCP_NONE, "eth4", "dscp", [3], "/usr/bin/mlnx_qos"
    ) == [
        ["/usr/bin/mlnx_qos", "-i", "eth4", "--trust", "dscp"],
        ["/usr/bin/mlnx_qos", "-i", "eth4", "--pfc", "0,0,0,1,0,0,0,0"],
    ]
    assert qos.mlnx_commands(MLNX_QOS_DSCP_PFC3, "eth4", "dscp", [3, 4]) == [
        ["mlnx_qos", "-i", "eth4", "--pfc", "0,0,0,1,1,0,0,0"],
    ]


def test_sysfs_plan_writes_what_differs_creates_configfs_and_skips_missing() -> None:
    files = {
        "/sys/class/net/eth4/ecn/roce_np/enable/3": "1",
        "/sys/class/net/eth4/ecn/roce_rp/enable/3": "0",
        "/cfg/rdma_cm/mlx5_1/ports/1/default_roce_tos": "106",
        "/sys/class/net/eth5/ecn/roce_rp/enable/3": "1",
    }
    plan = qos.sysfs_plan(
        [{"dev": "mlx5_0", "port": "1", "netdev": "eth4"},
         {"dev": "mlx5_1", "port": 1, "netdev": "eth5"}],
        [3], 106, "/sys", "/cfg", files.get)
    assert plan == {
        "writes": [
            {"path": "/sys/class/net/eth4/ecn/roce_rp/enable/3", "before": "0", "value": "1",
             "create": False},
            {"path": "/cfg/rdma_cm/mlx5_0/ports/1/default_roce_tos", "before": None,
             "value": "106", "create": True},
        ],
        "missing": ["/sys/class/net/eth5/ecn/roce_np/enable/3"],
    }


def test_sysfs_plan_nothing_when_state_matches() -> None:
    files = {"/sys/class/net/eth4/ecn/roce_np/enable/3": "1",
             "/sys/class/net/eth4/ecn/roce_rp/enable/3": "1",
             "/cfg/rdma_cm/mlx5_0/ports/1/default_roce_tos": "106"}
    plan = qos.sysfs_plan([{"dev": "mlx5_0", "port": "1", "netdev": "eth4"}], [3], 106,
                          "/sys", "/cfg", files.get)
    assert plan == {"writes": [], "missing": []}


def test_ports_only_ethernet_and_selected() -> None:
    """From node_facts' rdma_devices (the fact script's layout)."""
    rdma = [
        {"name": "mlx5_0", "fw_ver": None,
         "ports": [{"port": 1, "state": None, "link_layer": "Ethernet", "rate": None,
                    "netdev": "ens1f0np0"}]},
        {"name": "mlx5_1", "ports": [{"port": 1, "link_layer": "InfiniBand", "netdev": "ib0"}]},
        {"name": "mlx5_2", "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": None}]},
    ]
    assert mod.roce_qos_ports(rdma, []) == [
        {"dev": "mlx5_0", "port": "1", "link_layer": "Ethernet", "netdev": "ens1f0np0"},
    ]
    assert mod.roce_qos_ports(rdma, ["ib0"]) == []
    assert mod.roce_qos_ports([], []) == []


def test_ports_refuse_a_name_that_cannot_be_written() -> None:
    rdma = [{"name": "mlx5_0", "ports": [{"port": 1, "link_layer": "Ethernet",
                                          "netdev": "eth$(reboot)"}]}]
    with pytest.raises(mod.UnsafeValueError, match=re.escape("eth$(reboot)")):
        mod.roce_qos_ports(rdma, [])


def test_detection_applies_bool_only_to_values_not_to_its_own_templates(tmp_path: Path) -> None:
    """ansible-core warns that `| bool` on a value it does not know (the text of a task
    variable's unrendered template, as ansible-lint renders detect.yml) becomes an error in
    2.23. The role's own booleans are used as they are."""
    import os
    import subprocess
    import sys

    lint = Path(sys.executable).parent / "ansible-lint"
    # ansible-core 2.21's syntax check wants an inventory: a file of the test's own.
    # ANSIBLE_INVENTORY is a list of paths, not -i's host list: "localhost," there
    # names the working directory too, and Ansible would run every executable file
    # of the checkout (scripts/*.sh) as an inventory script.
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local\n")
    proc = subprocess.run([str(lint), "-q", "roles/roce_qos"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
                               "ANSIBLE_INVENTORY": str(inventory)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "coerced invalid value" not in out, out
