"""Fabric checks: RDMA ports up at rate, drift of MTU, TCP sysctls and RoCE QoS, and NIC
names (net_mtu_interfaces, NCCL_SOCKET_IFNAME, NCCL_IB_HCA) the node does not have.

MTU, sysctl and RoCE expectations are what ``apply`` would set (see
:mod:`nodetune.check.expect`); a difference is drift since the last apply,
named by interface or key so the operator knows what moved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.ansible.role_defaults import role_plugin
from nodetune.check import roce_cc
from nodetune.check.expect import VAR_RDMA_RATE, Expectations
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.probe_parse import Probe
from nodetune.measure import nccl_effective

SYSFS_PORTS = "/sys/class/infiniband/*/ports/*"
APPLY_HINT = "`nodetune apply` restores it"
# Its lines in check's --help (nodetune.check.listing), in report order (judge_probe's).
HELP: HelpLines = (
    ("fabric.rdma[D/P]",
     "RDMA port ACTIVE/LinkUp at nodetune_expected_rdma_rate_gbps",
     "(default: the node's fastest port)"),
    ("fabric.mtu[IF]",
     "MTU = what net_mtu_interfaces sets (drift since the last apply); a request",
     "that selects no interface here fails (warns: net_mtu_allow_absent_nics)"),
    ("fabric.sysctl[K]",
     "sysctl = net_sysctl_settings + _overrides + congestion control"),
    ("fabric.roce[IF]",
     "trust/PFC/RDMA-CM ToS = what roce_qos sets"),
    *roce_cc.HELP,
    ("fabric.nccl[K]",
     "NCCL_SOCKET_IFNAME / NCCL_IB_HCA in the node's /etc/nccl.conf and in the",
     "inventory name interfaces / RDMA ports the node has, by NCCL's rules (^ = and",
     "prefixes, NAME:PORT) (warns: nccl_config_allow_absent_nics)"),
)


def _rate_gbps(text: str | None) -> float | None:
    m = re.match(r"^\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m[1]) if m else None


def judge_probe(probe: Probe, exp: Expectations, gpus: GpuRead) -> list[CheckResult]:
    """fabric.rdma, .mtu, .sysctl, .roce, then .roce_cc (:mod:`nodetune.check.roce_cc`) and
    .nccl from what the probe read, in that order."""
    return [*judge_rdma(probe.rdma, exp),
            *judge_mtu(probe.interfaces, probe.connection, exp, ports=probe.rdma),
            *judge_sysctl(probe.sysctl, exp),
            *judge_roce(probe.roce, probe.rdma, exp),
            *roce_cc.judge(probe.roce, probe.rdma, exp),
            *judge_nccl_nics(probe.interfaces, probe.rdma, probe.nccl_conf, exp)]


def judge_rdma(ports: Sequence[Mapping[str, Any]], exp: Expectations) -> list[CheckResult]:
    """Every RDMA port ACTIVE / LinkUp at the expected rate (or its siblings' rate)."""
    if not ports:
        return [skipped("fabric.rdma", "no RDMA device (/sys/class/infiniband is empty)",
                        source=SYSFS_PORTS)]
    rates = [r for p in ports if (r := _rate_gbps(p.get("rate"))) is not None]
    want = exp.rdma_rate_gbps or (max(rates) if rates else None)
    source = VAR_RDMA_RATE if exp.rdma_rate_gbps else f"fastest port of this node ({SYSFS_PORTS})"
    out = []
    for p in ports:
        name = f"fabric.rdma[{p.get('device')}/{p.get('port')}]"
        state, phys, rate = (str(p.get(k) or "?") for k in ("state", "phys_state", "rate"))
        measured = f"{state}, {phys}, {rate}"
        expected = "ACTIVE, LinkUp" + (f", {want:g} Gb/sec" if want else "")
        problems = []
        if "ACTIVE" not in state:
            problems.append(f"port state {state}")
        if "LinkUp" not in phys:
            problems.append(f"physical state {phys}")
        got = _rate_gbps(p.get("rate"))
        if want and got is not None and got < want:
            problems.append(f"rate {got:g} Gb/s below {want:g}")
        netdev = f" ({p.get('netdev')})" if p.get("netdev") else ""
        if problems:
            out.append(failed(name, measured, expected, source,
                              f"{p.get('device')} port {p.get('port')}{netdev}: "
                              + ", ".join(problems)))
        else:
            out.append(passed(name, measured, expected, source))
    return out


def judge_mtu(interfaces: Mapping[str, Mapping[str, Any]], connection: Sequence[str],
              exp: Expectations, *, ports: Sequence[Mapping[str, Any]] = ()) -> (
        list[CheckResult]):
    """MTU of each interface ``net_mtu_interfaces`` selects, as net_mtu would leave it."""
    if not exp.mtu_enabled:
        return [skipped("fabric.mtu", "net_mtu_enabled is false", source="net_mtu_enabled")]
    if not exp.mtu_requests:
        return [skipped("fabric.mtu", "net_mtu_interfaces is empty: nothing is managed",
                        source=exp.mtu_source)]
    links = {}
    for name, info in interfaces.items():
        try:
            links[name] = {"mtu": int(str(info.get("mtu"))), "rdma": bool(info.get("rdma")),
                           "kind": "ethernet"}
        except ValueError:
            continue
    nics = role_plugin("plugins/module_utils/nics.py")
    requests = [dict(r) for r in exp.mtu_requests]
    wanted, _missing = nics.select(requests, links)
    out: list[CheckResult] = []
    for name, mtu in sorted(wanted.items()):
        check = f"fabric.mtu[{name}]"
        live = links[name]["mtu"]
        holds_connection = bool(interfaces[name].get("ipv4")) and (
            interfaces[name].get("ipv4") in connection)
        if holds_connection and not exp.mtu_allow_connection:
            out.append(skipped(check, f"{name} carries the SSH connection; net_mtu leaves it "
                               "alone (net_mtu_allow_connection_interface)",
                               expected=str(mtu), source=exp.mtu_source))
        elif live != mtu:
            out.append(failed(check, str(live), str(mtu), exp.mtu_source,
                              f"{name} MTU is {live}, apply sets {mtu}; {APPLY_HINT}"))
        else:
            out.append(passed(check, str(live), str(mtu), exp.mtu_source))
    # A request that selects nothing here is a no-op apply refuses, unless the
    # inventory allows it (net_mtu_allow_absent_nics, for nodes that differ).
    absent = warned if exp.mtu_allow_absent else failed
    has = nics.node_nics_text(list(interfaces), _devices(ports))
    out += [absent("fabric.mtu", "absent", "an interface of this node", exp.mtu_source,
                   f"{problem}; {has}") for problem in nics.unmatched_requests(requests, links)]
    if not out:
        out.append(skipped("fabric.mtu", "no interface here matches net_mtu_interfaces",
                           source=exp.mtu_source))
    return out


def _devices(ports: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """RDMA device -> its port numbers, from the probe's ports."""
    devices: dict[str, list[int]] = {}
    for p in ports:
        devices.setdefault(str(p.get("device")), []).append(int(str(p.get("port"))))
    return devices


def _nccl_file(content: str) -> dict[str, str]:
    """KEY=VALUE lines as NCCL reads its config file (:func:`nccl_effective.conf_values`)."""
    return nccl_effective.conf_values(content)


def judge_nccl_nics(interfaces: Mapping[str, Any], ports: Sequence[Mapping[str, Any]],
                    nccl_conf: Mapping[str, Any] | None, exp: Expectations) -> list[CheckResult]:
    """NCCL_SOCKET_IFNAME / NCCL_IB_HCA, in the node's NCCL config and in the inventory,
    against the node's interfaces and RDMA device ports (NCCL's own matching rules)."""
    nics = role_plugin("plugins/module_utils/nics.py")
    path = str((nccl_conf or {}).get("path") or exp.nccl_path)
    in_file = _nccl_file(str((nccl_conf or {}).get("content") or ""))
    devices = _devices(ports)
    has = nics.node_nics_text(list(interfaces), devices)
    out = []
    for key in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"):
        candidates = (nics.socket_candidates(list(interfaces)) if key == "NCCL_SOCKET_IFNAME"
                      else nics.hca_candidates(devices))
        live, asked = in_file.get(key), exp.nccl_nics.get(key)
        if live is None and asked is None:
            continue
        check = f"fabric.nccl[{key}]"
        source = asked.source if asked else path
        # What NCCL reads now, and what apply would write where that differs.
        values = [(path, live)] if live is not None else []
        if asked is not None and str(asked.value) != live:
            values.append((asked.name, str(asked.value)))
        absent = [f"{where}: {key}={value}: {problem}" for where, value in values
                  if (problem := nics.nccl_problem(key, value, candidates))]
        selected = ", ".join(nics.nccl_selected(live, candidates)) if live is not None else ""
        measured = (f"{key}={live} in {path} (matches {selected or 'nothing here'})"
                    if live is not None else f"unset in {path}")
        expected = str(asked.value) if asked else "names this node has"
        if absent and not exp.nccl_allow_absent:
            out.append(failed(check, measured, expected, source, "; ".join(absent) + f"; {has}"))
        elif absent:
            out.append(warned(check, measured, expected, source,
                              "; ".join(absent) + f"; {has} (nccl_config_allow_absent_nics)"))
        else:
            out.append(passed(check, measured, expected, source))
    if not out:
        out.append(skipped("fabric.nccl", f"NCCL_SOCKET_IFNAME and NCCL_IB_HCA are set neither "
                           f"in {path} nor in the inventory", source=exp.nccl_path))
    return out


def judge_sysctl(values: Mapping[str, Mapping[str, Any]], exp: Expectations) -> (
        list[CheckResult]):
    """Each sysctl net_sysctl manages against its inventory value (whitespace-insensitive)."""
    if not exp.sysctl_enabled:
        return [skipped("fabric.sysctl", "net_sysctl_enabled is false",
                        source="net_sysctl_enabled")]
    normalize = role_plugin("plugins/modules/nodetune_sysctl.py").normalize
    out = []
    for key, want in exp.sysctls.items():
        check, source = f"fabric.sysctl[{key}]", exp.sysctl_source.get(key, "")
        read = values.get(key) or {}
        raw = read.get("value")
        required = key in exp.sysctl_required
        if raw is None:
            msg = f"{key} does not exist here (not in this kernel or not per network namespace)"
            out.append(failed(check, "absent", want, "net_sysctl_required", msg) if required
                       else skipped(check, msg + "; net_sysctl skips it too",
                                    expected=want, source=source))
            continue
        live = normalize(raw)
        if live == want:
            out.append(passed(check, live, want, source))
        elif not read.get("writable", True) and not required:
            out.append(skipped(check, f"{key} is read-only here ({live}); net_sysctl skips it",
                               expected=want, source=source))
        else:
            out.append(failed(check, live, want, source,
                              f"{key} is {live}, apply sets {want}; {APPLY_HINT}"))
    return out


def judge_roce(roce: Mapping[str, Any], ports: Sequence[Mapping[str, Any]],
               exp: Expectations) -> list[CheckResult]:
    """RoCE trust, PFC and RDMA-CM ToS read back equal to what roce_qos sets (its ECN
    enables are :mod:`nodetune.check.roce_cc`'s, read without mlnx_qos too)."""
    if not exp.roce_enabled:
        return [skipped("fabric.roce", "roce_qos_enabled is false", source="roce_qos_enabled")]
    plugin = role_plugin("plugins/module_utils/roce_qos.py")
    devices = [{"name": p.get("device"), "ports": [p]} for p in ports]
    selected = plugin.ports(devices, list(exp.roce_interfaces))
    if not selected:
        return [skipped("fabric.roce", "no RoCE port (RDMA port with an Ethernet link layer)",
                        source="roce_qos_interfaces")]
    why = roce_cc.unmanaged(roce)
    if why:
        return [skipped("fabric.roce", why, source="roce_qos_force")]
    pfc = plugin.pfc_vector(list(exp.roce_pfc))
    want_pfc = ",".join(map(str, pfc))
    expected = f"trust {exp.roce_trust}, pfc {want_pfc}, tos {exp.roce_tos}"
    source = "roce_qos_trust/_pfc_priorities/_rdma_cm_tos"
    out = []
    for port in selected:
        netdev = port["netdev"]
        state = (roce.get("netdevs") or {}).get(netdev) or {}
        qos = state.get("mlnx_qos") or {}
        if qos.get("unknown"):  # mlnx_qos hung (its process group killed) or crashed
            out.append(unknown(f"fabric.roce[{netdev}]",
                               f"could not be assessed: {qos['unknown']}",
                               expected=expected, source=source))
            continue
        parsed = plugin.parse(str(qos.get("stdout", ""))) if qos.get("rc") == 0 else {
            "trust": None, "pfc": None}
        problems = []
        if parsed["trust"] != exp.roce_trust:
            problems.append(f"trust {parsed['trust']} (want {exp.roce_trust})")
        if parsed["pfc"] != pfc:
            got = ",".join(map(str, parsed["pfc"])) if parsed["pfc"] else "unreadable"
            problems.append(f"pfc {got} (want {want_pfc})")
        tos = state.get("rdma_cm_tos")
        if tos is not None and tos.strip() != exp.roce_tos:
            problems.append(f"RDMA-CM ToS {tos.strip()} (want {exp.roce_tos})")
        measured = (f"trust {parsed['trust']}, pfc "
                    f"{','.join(map(str, parsed['pfc'])) if parsed['pfc'] else '?'}, "
                    f"tos {tos.strip() if tos else 'unset'}")
        check = f"fabric.roce[{netdev}]"
        if problems:
            out.append(failed(check, measured, expected, source,
                              f"{netdev}: " + "; ".join(problems) + f"; {APPLY_HINT}"))
        else:
            out.append(passed(check, measured, expected, source))
    return out
