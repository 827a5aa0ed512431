#!/usr/bin/python
"""Read, compare and set RoCE QoS: trust mode and PFC (mlnx_qos), ECN enables, RDMA-CM ToS."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nodetune_roce_qos
short_description: Set RoCE trust mode, PFC, ECN and the RDMA-CM ToS where they differ
author: nodetune (!UNKNOWN)
description:
  - For each port, reads C(mlnx_qos -i NETDEV) and runs C(mlnx_qos --trust) and
    C(mlnx_qos --pfc) only for what differs from the wanted state.
  - Enables ECN (notification and reaction point) for each of I(ecn_priorities) under
    I(sysfs_root)/class/net/NETDEV/ecn, where the driver has those files; the paths it
    lacks come back in C(missing).
  - Writes I(rdma_cm_tos) to RDMA-CM's C(default_roce_tos) in configfs (what
    C(cma_roce_tos) sets), creating the device's configfs entry when it is absent.
  - Check mode reads everything and reports the same plan without running a set-request
    or writing a file; C(--diff) shows each changed value.
options:
  ports:
    type: list
    elements: dict
    required: true
    description:
      - RoCE ports, each with C(dev) (RDMA device), C(port) (port number) and C(netdev).
  trust:
    {type: str, required: true, choices: [dscp, pcp], description: Priority trust mode.}
  pfc_priorities:
    {type: list, elements: int, required: true, description: Priorities with PFC on.}
  ecn_priorities:
    {type: list, elements: int, default: [], description: Priorities with ECN on.}
  rdma_cm_tos:
    {type: int, required: true, description: RDMA-CM default ToS for RoCE connections.}
  tool:
    {type: str, default: mlnx_qos, description: The mlnx_qos command (a name on PATH or a path).}
  sysfs_root:
    {type: path, default: /sys, description: Where /sys is.}
  configfs_root:
    {type: path, default: /sys/kernel/config, description: Where configfs is mounted.}
  live:
    type: bool
    default: true
    description:
      - C(false) reads and plans as usual but runs no set-request and writes no file (a
        node running jobs); what would change is listed in C(deferred).
"""

EXAMPLES = r"""
- name: Lossless priority 3 with DSCP trust on one RoCE port
  nodetune.cluster.nodetune_roce_qos:
    ports:
      - {dev: mlx5_0, port: 1, netdev: ens1f0np0}
    trust: dscp
    pfc_priorities: [3]
    ecn_priorities: [3]
    rdma_cm_tos: 106
"""

RETURN = r"""
tool:
  description: The mlnx_qos path used.
  returned: always
  type: str
commands:
  description: The mlnx_qos set-requests run (in check mode, that would run), as argv lists.
  returned: always
  type: list
writes:
  description:
    - The sysfs and configfs files written (in check mode, that would be).
    - Each has path, before (null where absent), value and create.
  returned: always
  type: list
missing:
  description: ECN files the driver does not have (not set).
  returned: always
  type: list
deferred:
  description:
    - With I(live=false), one line per change left undone (C(what before → after)); the
      C(commands) and C(writes) it would make are still reported.
  returned: with I(live=false)
  type: list
"""

import os
from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.roce_qos import (
    mlnx_commands,
    parse,
    pfc_vector,
    sysfs_plan,
)


def read_file(path: str) -> str | None:
    """A sysfs/configfs file's stripped text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return None


def write_file(path: str, value: str, create: bool) -> None:
    """A plain write: sysfs and configfs files take no temp-file rename."""
    if create:
        # configfs creates ports/ inside rdma_cm/DEV on mkdir; makedirs tolerates that.
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(value + "\n")


def _vector(value: object) -> str:
    """A PFC vector as mlnx_qos --pfc takes it (0,0,0,1,0,0,0,0)."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "dict", "required": True},
            "trust": {"type": "str", "required": True, "choices": ["dscp", "pcp"]},
            "pfc_priorities": {"type": "list", "elements": "int", "required": True},
            "ecn_priorities": {"type": "list", "elements": "int", "default": []},
            "rdma_cm_tos": {"type": "int", "required": True},
            "tool": {"type": "str", "default": "mlnx_qos"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "configfs_root": {"type": "path", "default": "/sys/kernel/config"},
            "live": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    tool = module.get_bin_path(params["tool"], required=True)
    ports = params["ports"]
    for port in ports:
        if not all(str(port.get(key, "")) for key in ("dev", "port", "netdev")):
            module.fail_json(msg=f"nodetune_roce_qos: port {port!r} needs dev, port and netdev")

    commands: list[list[str]] = []
    diff_before: list[str] = []
    diff_after: list[str] = []
    deferred: list[str] = []
    for port in ports:
        netdev = str(port["netdev"])
        rc, out, err = module.run_command([tool, "-i", netdev])
        if rc != 0:
            module.fail_json(msg=f"{tool} -i {netdev} failed (rc {rc}): "
                                 f"{err.strip() or out.strip()}")
        wanted = mlnx_commands(out, netdev, params["trust"], params["pfc_priorities"], tool)
        if wanted:
            state = parse(out)
            diff_before.append(f"{netdev}: trust {state['trust']} pfc {state['pfc']}")
            diff_after.append(f"{netdev}: trust {params['trust']} pfc "
                              f"{pfc_vector(params['pfc_priorities'])}")
            deferred.append(
                f"{netdev} trust {state['trust']} → {params['trust']}, PFC "
                f"{_vector(state['pfc'])} → {_vector(pfc_vector(params['pfc_priorities']))}")
        commands.extend(wanted)

    plan = sysfs_plan(ports, params["ecn_priorities"], params["rdma_cm_tos"],
                      params["sysfs_root"], params["configfs_root"], read_file)
    for write in plan["writes"]:
        diff_before.append(f"{write['path']}: {write['before'] or '(absent)'}")
        diff_after.append(f"{write['path']}: {write['value']}")
        deferred.append(f"{write['path']} {write['before'] or '(absent)'} → {write['value']}")

    live = params["live"]
    if live and not module.check_mode:
        for argv in commands:
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): "
                                     f"{err.strip() or out.strip()}", commands=commands)
        for write in plan["writes"]:
            try:
                write_file(write["path"], write["value"], write["create"])
            except OSError as exc:
                module.fail_json(msg=f"nodetune_roce_qos: cannot write {write['path']}: {exc}",
                                 commands=commands)

    changed = live and bool(commands or plan["writes"])
    result: dict[str, Any] = {"changed": changed, "tool": tool, "commands": commands,
                              "writes": plan["writes"], "missing": plan["missing"]}
    if not live:
        result["deferred"] = deferred
    if changed:
        result["diff"] = {"before": "\n".join(diff_before) + "\n",
                          "after": "\n".join(diff_after) + "\n"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
