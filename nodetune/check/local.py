"""`nodetune check` run by a node on itself, with no controller and no inventory.

``apply`` with the ``slurm_healthcheck`` role leaves on the node a copy of
this package and one JSON file (:data:`CONFIG`): the node's inventory name,
its Slurm node name and the inventory variables the checks read (the same
names :mod:`nodetune.check.expect` reads, already templated by Ansible). The
node then runs :func:`nodetune.check.run.check_nodes` on itself through a
local session: the same expectations from the same role defaults, the same
probe (:mod:`nodetune.check.node_probe`), the same judgement and the same
``report.json`` sections as a controller's ``nodetune check``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import sys
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nodetune.action import Action
from nodetune.ansible.inventory import Host
from nodetune.check.model import CheckResult, NodeChecks, Status, skipped
from nodetune.check.run import CheckOptions, TorchReader, check_nodes, report_sections
from nodetune.check.signal_read import Previous
from nodetune.errors import InputError

CONFIG = Path("/etc/nodetune/healthcheck.json")
# The report as ``healthcheck --report`` prints it: lines of "<mark> <i> <n> <chunk>", the
# chunks base64 of the zlib'd JSON. srun passes a task's output in messages of at most
# 1024 bytes and cuts a longer line there; every line here stays well under that.
REPORT_MARK = "nodetune-check-report"
REPORT_CHUNK = 600
CONFIG_VERSION = 1
# The variables a node check may use are the roles' and nodetune's own; connection
# variables are replaced, since the node checks itself through a local session.
_CONNECTION_VARS = re.compile(r"^ansible_")
_ADDRESS = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RDMA_BW = "fabric.rdma_bw"
# The checks that load the node (a GPU, a link): never where a job may run. Name -> what.
ACTIVE = {"gpu.allreduce": "the one-node NCCL all_reduce sweep",
          "dcgm.diag": "dcgmi diag -r LEVEL (DCGM's diagnostic runs tests on the GPUs)",
          RDMA_BW: "ib_write_bw against a peer"}


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """What apply installed for the node-local check."""

    host: str                    # the node's inventory name (the report's node name)
    slurm_node: str              # its Slurm node name
    variables: dict[str, Any]    # inventory variables the checks read
    connection_address: str = ""  # the address apply reached the node at (its NIC is not tuned)
    path: str = str(CONFIG)

    def host_entry(self) -> Host:
        """The node as an inventory host reached through a local session."""
        own = {k: v for k, v in self.variables.items() if not _CONNECTION_VARS.match(k)}
        return Host(name=self.host, groups=(),
                    vars={**own, "ansible_connection": "local",
                          "ansible_python_interpreter": sys.executable})


def load_config(path: Path = CONFIG) -> LocalConfig:
    """Read and check the installed configuration.

    Raises:
        InputError: the file is missing, not JSON, or of the wrong shape (names the file).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the node check's configuration ({exc.strerror}); "
                         "apply the slurm_healthcheck role to this node") from None
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != CONFIG_VERSION:
        raise InputError(f"{path}: not a version {CONFIG_VERSION} node check configuration")
    host, slurm_node = doc.get("host"), doc.get("slurm_node")
    variables, address = doc.get("vars"), doc.get("connection_address") or ""
    for key, value in (("host", host), ("slurm_node", slurm_node)):
        if not isinstance(value, str) or not _NAME.match(value):
            raise InputError(f"{path}: {key} {value!r} is not a plain node name")
    if not isinstance(variables, dict):
        raise InputError(f"{path}: vars must be a mapping of variable: value")
    if not isinstance(address, str) or (address and not _ADDRESS.match(address)):
        raise InputError(f"{path}: connection_address {address!r} is not an IP address")
    return LocalConfig(host=str(host), slurm_node=str(slurm_node),
                       variables={str(k): v for k, v in variables.items()},
                       connection_address=address, path=str(path))


def check_self(config: LocalConfig, *, timeout: float = 60.0, passive: str | None = None,
               versions: TorchReader | None = None,
               previous: Previous | None = None) -> NodeChecks:
    """Every check of this node, as ``nodetune check`` runs them from a controller.

    ``passive``: why only state is read (the health check's mode; None: the active checks
    run too). Then nothing runs on a GPU: no all_reduce, no ``dcgmi diag``, no ib_write_bw
    (each reported as a skip with this reason), and torch is not imported: its versions
    come from ``versions`` (:class:`nodetune.check.local_state.VersionCache`).

    The probe learns which interface carries the controller's connection from
    ``SSH_CONNECTION`` (sshd sets it); here that is the address apply used, so
    the rule that net_mtu leaves that interface alone is judged the same way.

    Raises:
        InputError: a variable of the wrong type or shape (names the host and variable).
    """
    if config.connection_address:
        os.environ["SSH_CONNECTION"] = f"- - {config.connection_address} 22"
    else:
        os.environ.pop("SSH_CONNECTION", None)
    if passive is None:
        options = CheckOptions(timeout=timeout, parallel=1)
    else:
        options = CheckOptions(timeout=timeout, parallel=1, allreduce=False, dcgm_level=0,
                               torch_versions=versions)
    checks = check_nodes([config.host_entry()], options, previous=None if previous is None
                         else {config.host: previous})[config.host]
    return checks if passive is None else without_active(checks, passive)


def without_active(checks: NodeChecks, why: str) -> NodeChecks:
    """``checks`` with each active check (:data:`ACTIVE`) a skip saying ``why`` (the ones
    that were not asked for, or every one, as the caller chose to run them)."""
    if checks.error is not None:
        return checks
    kept = tuple(r for r in checks.results if r.name not in ACTIVE
                 and not r.name.startswith(f"{RDMA_BW}["))
    return replace(checks, allreduce=(), results=kept + tuple(
        skipped(name, why, source=what) for name, what in ACTIVE.items()))


def without(checks: NodeChecks, name: str, why: str) -> NodeChecks:
    """``checks`` with the check ``name`` a skip saying ``why`` (its source kept): a result
    this run can no longer stand by."""
    if checks.error is not None:
        return checks
    return replace(checks, results=tuple(
        skipped(r.name, why, expected=r.expected, source=r.source) if r.name == name else r
        for r in checks.results))


def report(config: LocalConfig, checks: NodeChecks, *, mode: str) -> dict[str, Any]:
    """``report.json`` of the node-local run: ``nodetune check``'s sections for one node."""
    doc = {"verb": "check", "launcher": "local", "mode": mode, "config": config.path,
           "host": config.host, "slurm_node": config.slurm_node,
           **report_sections({config.host: checks})}
    if checks.error is not None:
        doc["error"] = {"message": checks.error, "exit_code": checks.error_exit_code}
    return doc


def from_report(doc: Mapping[str, Any], host: str) -> NodeChecks:
    """The :class:`NodeChecks` a node-local report (:func:`report`) holds for ``host``.

    Raises:
        ValueError: the document is not such a report, or is about another host.
    """
    from nodetune.measure.sweep import SizeResult  # the controller's; not the node's run

    if doc.get("verb") != "check" or doc.get("host") != host:
        raise ValueError(f"not a node check report of {host} "
                         f"(it names {doc.get('host')!r})")
    error = doc.get("error")
    results = tuple(_result(r) for r in doc["checks"].get(host, ()))
    sizes = tuple(SizeResult.from_dict(s) for s in doc.get("allreduce", {}).get(host, ()))
    return NodeChecks(node=host, results=results,
                      error=str(error["message"]) if isinstance(error, dict) else None,
                      error_exit_code=error.get("exit_code") if isinstance(error, dict) else None,
                      duration_s=float(doc["summary"]["duration_s"].get(host, 0.0)),
                      allreduce=sizes, health=dict(doc.get("health", {}).get(host, {})),
                      versions={str(k): str(v) for k, v in
                                (doc.get("versions", {}).get(host) or {}).items()},
                      hca_firmware={str(k): str(v) for k, v in
                                    (doc.get("hca_firmware", {}).get(host) or {}).items()},
                      window=dict(w[host]) if isinstance(w := doc.get("window"), dict)
                      and isinstance(w.get(host), dict) else {})


def _result(r: Mapping[str, Any]) -> CheckResult:
    """One check of a node-local report, with the action the check set itself where it is
    not the check's default (a recorded rung this version does not know: the default)."""
    result = CheckResult(str(r["name"]), Status(r["status"]), str(r["measured"]),
                         str(r["expected"]), str(r["source"]), str(r["message"]))
    try:
        recorded = Action(r["action"]) if isinstance(r.get("action"), str) else None
    except ValueError:
        recorded = None
    if recorded is not None and recorded is not result.recommended:
        return replace(result, action=recorded)
    return result


def report_lines(doc: Mapping[str, Any]) -> list[str]:
    """``doc`` as :data:`REPORT_MARK` lines, each short enough to pass srun whole."""
    data = base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode()
    chunks = [data[i:i + REPORT_CHUNK] for i in range(0, len(data), REPORT_CHUNK)] or [""]
    return [f"{REPORT_MARK} {i} {len(chunks)} {c}" for i, c in enumerate(chunks)]


class ReportReader:
    """Collects one node's :func:`report_lines` (other lines are the node's own words)."""

    def __init__(self) -> None:
        self.chunks: dict[int, str] = {}
        self.total: int | None = None

    def feed(self, line: str) -> bool:
        """Take ``line`` if it is a report line; False if it is not one."""
        words = line.split(" ")
        if len(words) != 4 or words[0] != REPORT_MARK or not (
                words[1].isdigit() and words[2].isdigit()):
            return False
        self.total = int(words[2])
        self.chunks[int(words[1])] = words[3]
        return True

    def document(self) -> dict[str, Any] | None:
        """The report once every chunk came, else None.

        Raises:
            ValueError: the chunks do not decode to a JSON object.
        """
        if self.total is None or len(self.chunks) < self.total:
            return None
        try:
            data = zlib.decompress(base64.b64decode("".join(
                self.chunks[i] for i in range(self.total))))
        except (KeyError, zlib.error, binascii.Error) as exc:
            raise ValueError(f"the report's chunks do not decode: {exc}") from None
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("the report is not a JSON object")
        return doc
