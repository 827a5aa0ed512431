"""``fabric.roce_cc[IF]``: RoCE congestion control (DCQCN) on, at both of its ends, for the
priorities RoCE traffic uses (``roce_qos_ecn_priorities``).

DCQCN has a reaction point (the sender, which cuts its rate when congestion notification
packets arrive) and a notification point (the receiver, which sends them for ECN-marked
packets); each is enabled per priority. NVIDIA's mlx5 driver (MLNX_OFED / DOCA-OFED)
shows them as ``/sys/class/net/IF/ecn/roce_rp/enable/P`` and ``.../roce_np/enable/P``,
``1`` enabled ("Explicit Congestion Notification (ECN)", NVIDIA MLNX_OFED documentation
v24.10-3.2.5.0 LTS, https://docs.nvidia.com/networking/display/mlnxofedv24103250lts/
explicit+congestion+notification+(ecn); "DCQCN CC Parameters", Enable: "Enables RoCE
Congestion Control (DCQCN) on a specific priority", default enabled, DOCA 3.4,
https://networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters; read
2026-11-30). The probe reads them once (``roce`` in :mod:`nodetune.check.node_probe`);
roce_qos writes them, and this check, not ``fabric.roce``, judges them. An enable that is
0 fails (``nodetune apply`` restores it); a driver without the tree (the inbox mlx5) is a
skip with the reason.

The firmware's own view is the PPCC access register (Port Programmable Congestion
Control, DOCA PCC, https://docs.nvidia.com/doca/sdk/doca-pcc/index.html). OCI's GPU
health check reads it with ``mlxreg -d DEV --set "cmd_type=3" --reg_name PPCC --indexes
"local_port=1,pnat=0,lp_msb=0,algo_slot=0,algo_param_index=0"`` and takes ``value
0x00000001`` as enabled (oracle-quickstart/oci-hpc, playbooks/roles/healthchecks/files/
check_gpu_setup.py, ``check_rttcc_status``): a register SET access, which a health check
does not send to a busy node. Here the same question goes as a GET access, the command
type in mlxreg's ``--op`` ("Register optional fields", sent with ``--get``: mstflint
mlxreg/mlxreg_ui.cpp; the mlxreg utility, NVIDIA MFT 4.36 user manual,
https://networking-docs.nvidia.com/mftswum/4.36.0/mlxreg-utility: ``-g|--get`` "Register
access GET"), and only when the operator asks for it by name (``check --read-ppcc``):
otherwise, and where mlxreg is not installed, the check says the register was not read.
Which algorithm sits in algo_slot 0 is the firmware's (OCI's check reads slot 0 as RTTCC,
and fails a node where it is on), so the register's value is reported beside the verdict
and never judged: the verdict is the driver's DCQCN enables alone.

Where roce_qos configures nothing (no mlnx_qos on the node: :func:`unmanaged`), neither
this check nor ``fabric.roce`` holds the node to roce_qos's values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from nodetune.ansible.role_defaults import role_plugin
from nodetune.check.expect import Expectations
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned

NAME = "fabric.roce_cc"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("fabric.roce_cc[IF]",
     "DCQCN reaction and notification points on (ecn/roce_rp, roce_np) for",
     "roce_qos_ecn_priorities; --read-ppcc: the PPCC register too (mlxreg --get)"),
)
OPTION = "--read-ppcc"
POINTS = (("roce_rp", "reaction point"), ("roce_np", "notification point"))
SOURCE = ("roce_qos_ecn_priorities; /sys/class/net/IF/ecn/roce_{rp,np}/enable/P (NVIDIA "
          "MLNX_OFED 'Explicit Congestion Notification (ECN)', DOCA 'DCQCN CC Parameters')")
_VALUE = re.compile(r"^\s*value\s*\|\s*0x([0-9a-fA-F]{1,8})\s*$", re.M)


def unmanaged(roce: Mapping[str, Any]) -> str | None:
    """Why roce_qos configures nothing on this node (None: it does): the one rule
    ``fabric.roce`` and this check skip by (roles/roce_qos/tasks/detect.yml: no mlnx_qos,
    nothing is set)."""
    if not roce.get("tool"):
        return ("mlnx_qos is not installed: roce_qos configures nothing here (it comes with "
                "MLNX_OFED / DOCA-OFED)")
    return None


def ppcc_status(res: Mapping[str, Any]) -> tuple[bool | None, str]:
    """(algo_slot 0 enabled?, what was read) from one mlxreg PPCC GET's answer; None where
    it gave no value (the words say why)."""
    out = str(res.get("stdout", ""))
    m = _VALUE.search(out) if res.get("rc") == 0 else None
    if m is None:
        said = (str(res.get("stderr") or "").strip() or out.strip()).splitlines()
        last = "".join(c if c.isprintable() else "?" for c in (said[-1] if said else "")[:200])
        return None, f"mlxreg could not read PPCC (exit {res.get('rc')}: {last or 'no output'})"
    value = int(m[1], 16)
    return value == 1, f"PPCC algo_slot 0 {'enabled' if value == 1 else 'disabled'} (0x{value:x})"


class Ppcc(NamedTuple):
    """One port's PPCC read: algo_slot 0 enabled (None: no value), in words; ``hung``: why
    it was not assessed (mlxreg hung or crashed); ``unread``: asked, and mlxreg failed."""

    enabled: bool | None
    words: str
    hung: str | None = None
    unread: bool = False


def _ppcc(roce: Mapping[str, Any], state: Mapping[str, Any], dev: str) -> Ppcc:
    """The port's PPCC read, or the reason it was not made."""
    if not roce.get("ppcc_asked"):
        return Ppcc(None, f"PPCC not read (an access register read through mlxreg: {OPTION})")
    if not roce.get("mlxreg"):
        return Ppcc(None, "PPCC not read: mlxreg (NVIDIA MFT) is not on the node's PATH")
    res = state.get("ppcc")
    if not isinstance(res, Mapping):
        return Ppcc(None, f"PPCC not read: no PCI function found for {dev}")
    if res.get("unknown"):
        return Ppcc(None, "", hung=f"mlxreg PPCC: {res['unknown']}")
    enabled, words = ppcc_status(res)
    return Ppcc(enabled, words, unread=enabled is None)


def judge(roce: Mapping[str, Any], ports: Sequence[Mapping[str, Any]],
          exp: Expectations) -> list[CheckResult]:
    """One result per RoCE port roce_qos selects."""
    if not exp.roce_enabled:
        return [skipped(NAME, "roce_qos_enabled is false: no priority is set for RoCE",
                        source="roce_qos_enabled")]
    if not exp.roce_ecn:
        return [skipped(NAME, "roce_qos_ecn_priorities is empty: no priority carries "
                        "congestion control", source="roce_qos_ecn_priorities")]
    plugin = role_plugin("plugins/module_utils/roce_qos.py")
    devices = [{"name": p.get("device"), "ports": [p]} for p in ports]
    selected = plugin.ports(devices, list(exp.roce_interfaces))
    if not selected:
        return [skipped(NAME, "no RoCE port (RDMA port with an Ethernet link layer)",
                        source="roce_qos_interfaces")]
    why = unmanaged(roce)
    if why:
        return [skipped(NAME, why, source="roce_qos_force")]
    prios = list(exp.roce_ecn)
    expected = f"DCQCN reaction and notification points on for priorities {prios}"
    return [_one(port, roce, prios, expected) for port in selected]


def _one(port: Mapping[str, Any], roce: Mapping[str, Any], prios: list[int],
         expected: str) -> CheckResult:
    netdev = str(port["netdev"])
    name = f"{NAME}[{netdev}]"
    state = (roce.get("netdevs") or {}).get(netdev) or {}
    ecn = state.get("ecn") or {}
    read = {f"{p}/{n}": str(ecn[f"{p}/{n}"]).strip() for n in prios for p, _ in POINTS
            if ecn.get(f"{p}/{n}") is not None}
    off = [f"{what} ({point}) priority {n} is {read[f'{point}/{n}']}" for n in prios
           for point, what in POINTS if read.get(f"{point}/{n}", "1") != "1"]
    ppcc = _ppcc(roce, state, str(port["dev"]))
    words = ppcc.words
    measured = ", ".join([*(f"{k}={v}" for k, v in read.items()), *([words] if words else [])]
                         ) or "nothing read"
    where = f"/sys/class/net/{netdev}/ecn"
    if off:
        return failed(name, measured, expected, SOURCE,
                      f"{netdev}: DCQCN " + "; ".join(off) + ": RoCE traffic there is not "
                      "slowed down on congestion (PFC pauses instead, spreading it); "
                      "`nodetune apply` restores it (roce_qos)")
    if ppcc.hung:  # the register was asked for and mlxreg hung or crashed: not assessed
        return unknown(name, f"could not be assessed: {ppcc.hung}", expected=expected,
                       source=SOURCE)
    if not read:
        return skipped(name, f"{netdev} has no {where}/roce_{{rp,np}}/enable/ (the mlx5 "
                       "driver of MLNX_OFED / DOCA-OFED shows DCQCN there, the inbox driver "
                       f"does not); {words}", expected=expected, source=SOURCE)
    if len(read) < 2 * len(prios) and read:
        missing = sorted({f"{p}/{n}" for n in prios for p, _ in POINTS} - set(read))
        return warned(name, measured, expected, SOURCE,
                      f"{netdev}: not assessed in full: {where}/{{{','.join(missing)}}} "
                      f"missing; {words}")
    return passed(name, measured, expected, SOURCE, words + (
        " (reported, not judged: which algorithm algo_slot 0 holds is the firmware's)"
        if ppcc.enabled is not None or ppcc.unread else ""))
