"""Hostile names and values never reach a file the roles write (the real templates, rendered).

Each file format the roles write is rendered from its real template with
Ansible's own templar and the role's own filters, once with ordinary values
(the output is the expected text) and once with hostile ones (a quote that
would add udev keys, a line break that would add sysctl/NCCL/apt lines,
shell metacharacters): hostile values are either escaped for that format or
refused with a message naming the variable or the interface.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins import collection_loader, load_plugin

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_NAMES = ['q",NAME="pwn', "eth0\nKERNEL", "$(reboot)", "a;rm -rf /", "x`id`", "e'1"]




def render(role: str, template: str, **variables: Any) -> str:
    """Render roles/<role>/templates/<template> as the template module would."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    collection_loader()  # the roles call the collection's filters by FQCN (nodetune.cluster.*)
    source = (ROOT / "roles" / role / "templates" / template).read_text()
    templar = Templar(loader=DataLoader(),
                      variables={"ansible_managed": "Ansible managed", **variables})
    return str(templar.template(trust_as_template(source)))


def _links(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "mtu": 9000, "kind": "ethernet"} for n in names]


# --- net_mtu: udev, if-up.d shell, netplan YAML, networkd --------------------------------

UDEV = "etc/udev/rules.d/90-nodetune-mtu.rules.j2"
IFUP = "etc/network/if-up.d/nodetune-mtu.j2"
NETPLAN = "etc/netplan/90-nodetune-mtu.yaml.j2"


def test_ordinary_names_render_as_before() -> None:
    udev = render("net_mtu", UDEV, net_mtu_result=_links("ens1f0np0", "eth0.100"))
    assert ('ACTION=="add", SUBSYSTEM=="net", KERNEL=="ens1f0np0", ATTR{mtu}="9000"'
            in udev.splitlines())
    shell = render("net_mtu", IFUP, net_mtu_result=_links("ens1f0np0"))
    assert '  ens1f0np0) exec ip link set dev "$IFACE" mtu 9000 ;;' in shell.splitlines()
    plan = yaml.safe_load(render("net_mtu", NETPLAN, net_mtu_result=_links("ens1f0np0")))
    assert plan["network"]["ethernets"] == {"ens1f0np0": {"mtu": 9000}}


@pytest.mark.parametrize("template", [UDEV, IFUP, NETPLAN])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_interface_names_are_refused_in_every_net_mtu_file(
        template: str, name: str) -> None:
    with pytest.raises(Exception, match="is not written into udev/netplan/networkd/shell"):
        render("net_mtu", template, net_mtu_result=_links(name))


def test_the_shell_hook_quotes_names_even_where_the_filter_allows_them() -> None:
    shell = render("net_mtu", IFUP, net_mtu_result=_links("eth+1"))
    case_line = next(line for line in shell.splitlines() if "exec ip link" in line)
    assert shlex.split(case_line)[0] == "eth+1)"


def test_networkd_dropin_takes_only_an_integer_mtu() -> None:
    out = render("net_mtu", "etc/systemd/network/nodetune-mtu.conf.j2",
                 item={"name": "eth0", "mtu": "9000"})
    assert out.splitlines()[-1] == "MTUBytes=9000"
    out = render("net_mtu", "etc/systemd/network/nodetune-mtu.conf.j2",
                 item={"name": "eth0", "mtu": "9000\n[Match]\nName=*"})
    assert "[Match]" not in out and "Name=*" not in out


def test_nodetune_mtu_refuses_hostile_names_a_regex_selects_on_the_node() -> None:
    mod = load_plugin("plugins/modules/nodetune_mtu.py")
    assert mod.check_name("ens1f0np0") is None
    for name in HOSTILE_NAMES:
        assert "has characters nodetune does not write" in mod.check_name(name)


# --- roce_qos: boot script (shell) and systemd unit -----------------------------------------

ROCE_SCRIPT = "usr/local/sbin/nodetune-roce-qos.j2"
ROCE_UNIT = "etc/systemd/system/nodetune-roce-qos.service.j2"


def _roce_vars(netdev: str, tool: str = "/usr/bin/mlnx_qos") -> dict[str, Any]:
    return {"__roce_qos_ports": [{"dev": "mlx5_0", "port": "1", "netdev": netdev}],
            "__roce_qos_tool_path": tool, "roce_qos_trust": "dscp",
            "__roce_qos_pfc_csv": "0,0,0,1,0,0,0,0", "roce_qos_ecn_priorities": [3],
            "roce_qos_rdma_cm_tos": 106, "__roce_qos_sysfs_root": "/sys",
            "__roce_qos_configfs_root": "/sys/kernel/config",
            "__roce_qos_apply_script": "/usr/local/sbin/nodetune-roce-qos"}


def test_roce_unit_escapes_device_names_as_systemd_does() -> None:
    unit = render("roce_qos", ROCE_UNIT, **_roce_vars("ens1f0np0"))
    assert "After=sys-subsystem-net-devices-ens1f0np0.device" in unit.splitlines()
    unit = render("roce_qos", ROCE_UNIT, **_roce_vars("roce-1"))
    # systemd-escape --path /sys/subsystem/net/devices/roce-1
    assert r"Wants=sys-subsystem-net-devices-roce\x2d1.device" in unit.splitlines()


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_roce_unit_refuses_hostile_netdevs(name: str) -> None:
    with pytest.raises(Exception, match="nodetune does not write into the boot script"):
        render("roce_qos", ROCE_UNIT, **_roce_vars(name))


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, "$(touch INJECTED)"])
def test_roce_boot_script_passes_hostile_netdevs_as_one_word(name: str, tmp_path: Path) -> None:
    """Run the rendered script with a recording stand-in for mlnx_qos: no injection."""
    tool = tmp_path / "mlnx qos"
    log = tmp_path / "argv.log"
    tool.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> '{log}'\n")
    tool.chmod(0o755)
    variables = _roce_vars(name, tool=str(tool))
    variables.update(__roce_qos_sysfs_root=str(tmp_path / "sys"),
                     __roce_qos_configfs_root=str(tmp_path / "cfg"))
    script = tmp_path / "roce.sh"
    script.write_text(render("roce_qos", ROCE_SCRIPT, **variables))
    subprocess.run(["sh", str(script)], cwd=tmp_path, check=False, timeout=30)
    argv = log.read_text().split("\0")
    assert argv[:4] == ["-i", name, "--trust", "dscp"]
    assert not (tmp_path / "INJECTED").exists()


def test_roce_script_quotes_the_tool_path_read_from_the_node() -> None:
    script = render("roce_qos", ROCE_SCRIPT, **_roce_vars("ens1f0np0", tool="/opt/my tools/mlnx_qos"))
    line = next(ln for ln in script.splitlines() if "--trust" in ln)
    assert shlex.split(line)[:5] == ["/opt/my tools/mlnx_qos", "-i", "ens1f0np0", "--trust", "dscp"]


def test_roce_ports_from_sysfs_with_hostile_names_are_refused() -> None:
    ports = load_plugin("plugins/filter/roce_qos.py").roce_qos_ports

    def rdma(dev: str, port: str, netdev: str) -> list[dict[str, object]]:
        """node_facts' rdma_devices shape."""
        return [{"name": dev, "ports": [{"port": port, "link_layer": "Ethernet",
                                         "netdev": netdev}]}]

    assert ports(rdma("mlx5_0", "1", "ens1f0np0"), []) == [
        {"dev": "mlx5_0", "port": "1", "link_layer": "Ethernet", "netdev": "ens1f0np0"}]
    for dev, port, netdev in [("mlx5_0", "1", 'q",NAME="x'), ("mlx5_0", "1", "$(id)"),
                              ("mlx$0", "1", "e0"), ("mlx5_0", "1;x", "e0")]:
        with pytest.raises(ValueError, match="roce_qos: "):
            ports(rdma(dev, port, netdev), [])


# --- sysctl.d, modules-load.d, nccl.conf ---------------------------------------------------

def test_sysctl_file_renders_one_line_per_key() -> None:
    # The module writes the file (a value with a line break never gets here: the role's
    # check refuses it, test_net_role_inputs).
    render_conf = load_plugin("plugins/modules/nodetune_sysctl.py").render_conf
    out = render_conf("#\n# Ansible managed\n#", {
        "net.ipv4.tcp_rmem": "4096 131072 6291456", "net.core.rmem_max": 67108864,
        "net.core.default_qdisc": "fq", "net.core.wmem_max": 67108864},
        ["net.core.default_qdisc"], ["net.core.wmem_max"])
    assert out == (
        "#\n# Ansible managed\n#\n"
        "# Network tuning from the nodetune net_sysctl role; see its README for sources.\n"
        "# net.core.default_qdisc = fq  (skipped: not present on this node)\n"
        "net.core.rmem_max = 67108864\n"
        "# net.core.wmem_max = 67108864  (skipped: read-only on this node)\n"
        "net.ipv4.tcp_rmem = 4096 131072 6291456\n")


NCCL_FILTER = "plugins/filter/nccl_config.py"


@pytest.mark.parametrize("value", ["WARN\nNCCL_IB_DISABLE=1", "WARN\rNCCL_X=1",
                                   "x\x00y", "# END nodetune nccl_config\n"])
def test_nccl_values_with_control_characters_are_refused(value: str) -> None:
    check = load_plugin(NCCL_FILTER).nccl_config_check
    got = check({"NCCL_DEBUG_FILE": value}, {}, {})
    assert got["errors"] and "nccl_config_extra.NCCL_DEBUG_FILE" in got["errors"][0]


def test_nccl_keys_must_be_whole_nccl_names() -> None:
    check = load_plugin(NCCL_FILTER).nccl_config_check
    assert check({"NCCL_DEBUG\nLD_PRELOAD": "x"}, {}, {})["errors"]


def test_nccl_conf_renders_key_value_lines() -> None:
    out = render("nccl_config", "etc/nccl.conf.j2",
                 __nccl_config_settings={"NCCL_IB_TC": 106, "NCCL_IB_DISABLE": True})
    assert out.splitlines()[-2:] == ["NCCL_IB_TC=106", "NCCL_IB_DISABLE=1"]
