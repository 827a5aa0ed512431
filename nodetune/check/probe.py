"""Run the node probe (:mod:`nodetune.check.node_probe`) over a session and read its answer."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.check import node_program
from nodetune.check.expect import Expectations
from nodetune.check.node_probe import TORCH_SNIPPET
from nodetune.errors import LaunchError, NodeTimeout, SSHError
from nodetune.remote import ssh

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_ENV_NAME = re.compile(r"^(?:NCCL|CUDA)_[A-Za-z0-9_]{1,120}$")
OUT_LIMIT = 4000  # characters of a time tool's output kept (node_host.OUT_LIMIT)
_AUTO = ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent")


@dataclass(frozen=True, slots=True)
class Probe:
    """What one node reported, checked for shape; every name is a plain name."""

    host: str
    hostname: str
    python: str
    nvidia: dict[str, Any] = field(default_factory=dict)
    rdma: tuple[dict[str, Any], ...] = ()
    interfaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    sysctl: dict[str, dict[str, Any]] = field(default_factory=dict)
    shm: dict[str, Any] = field(default_factory=dict)
    roce: dict[str, Any] = field(default_factory=dict)
    torch: dict[str, Any] | None = None
    connection: tuple[str, ...] = ()
    nccl_conf: dict[str, Any] | None = None  # {path, content} of the NCCL config; None: absent
    time_sync: dict[str, Any] = field(default_factory=dict)   # node_host.time_sync
    global_env: dict[str, Any] = field(default_factory=dict)  # node_host.global_env
    kernel: str | None = None                    # uname -r
    hca_firmware: dict[str, str] = field(default_factory=dict)  # RDMA device -> fw_ver
    ofed: str | None = None                      # ofed_info -s (None: not installed)
    ofed_unknown: str | None = None              # why ofed_info -s gave nothing (it hung)


def source() -> str:
    """The probe program's source, run on the node with ``python -c``.

    It carries node_facts' fact script, whose functions read the PCI bus and the RDMA
    ports for the probe as they do for the roles, :mod:`nodetune.check.node_host`
    (time sync, host-wide environment), :mod:`nodetune.check.node_nvml` (the GPUs through
    NVML) and :mod:`nodetune.check.node_run` (the runner
    every tool goes through).
    """
    return node_program.embed("node_probe.py", FACT_SOURCE=node_program.fact_text(),
                              HOST_SOURCE=node_program.text("node_host.py"),
                              NVML_SOURCE=node_program.text("node_nvml.py"))


def probe_python(host: Host) -> str:
    """The interpreter that runs the probe: ``ansible_python_interpreter`` or ``python3``.

    A templated value (``{{ ansible_playbook_python }}`` for local hosts) means the
    controller's own Python on a local host.
    """
    value = str(host.vars.get("ansible_python_interpreter") or "")
    if host.connection in ssh.LOCAL_CONNECTIONS and (not value or "{{" in value):
        return sys.executable
    if not value or "{{" in value or value in _AUTO:
        return "python3"
    return value


def request(exp: Expectations, *, timeout: float, torch: bool = True,
            env: Mapping[str, str] | None = None, ppcc: bool = False) -> dict[str, Any]:
    """The probe's one argument: which sysctls to read, which python has torch (none where
    ``torch`` is False: the caller reads torch's versions elsewhere), which NCCL config
    file, whether to read the RoCE ports' PPCC register (``check --read-ppcc``), each
    tool's timeout and the time all of them have together."""
    return {"sysctls": exp.sysctl_keys, "torch_python": exp.torch_python if torch else None,
            "torch_env": dict(env or {}), "ppcc": ppcc,
            "nccl_conf": exp.nccl_path, "timeout": max(5.0, timeout / 2),
            # every tool has answered (or been killed) by then, within the session's wait
            "budget": max(5.0, timeout * 0.8)}


def run_probe(session: ssh.Session, host: Host, exp: Expectations, *, timeout: float,
              torch: bool = True, env: Mapping[str, str] | None = None,
              ppcc: bool = False) -> Probe:
    """Run the probe on ``host`` (one command, nothing left on the node) and parse it.

    Raises:
        LaunchError: no Python to run it, or an answer that is not the probe's.
        NodeTimeout: no answer within ``timeout``.
    """
    python = probe_python(host)
    asked = request(exp, timeout=timeout, torch=torch, env=env, ppcc=ppcc)
    # -S (node_program.launch): torch is read by the probe's own child, with site
    res = node_program.launch(session, python, source(), asked, timeout=timeout)
    if res.exit_status in (126, 127):
        raise LaunchError(f"{python!r} not found on the node; set ansible_python_interpreter "
                          "to its Python 3", host=host.name)
    return parse(host.name, node_program.answer(res, python=python, mark="probe",
                                                what="the check probe", host=host.name,
                                                needs="; it needs Python >= 3.8"))


def torch_only(session: ssh.Session, python: str, *, timeout: float,
               env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """torch's versions as the probe reads them (:data:`node_probe.TORCH_SNIPPET`), alone,
    within the probe's own limit for it; a hung or failed import is the answer's error."""
    limit = max(5.0, timeout / 2)
    try:
        res = session.run([python, "-c", TORCH_SNIPPET], timeout=limit, env=dict(env or {}))
    except (NodeTimeout, SSHError) as exc:
        return {"error": f"exit None: {exc.message}"}
    doc = node_program.last_object(res.stdout) if res.exit_status == 0 else None
    if doc is not None:
        return doc
    detail = (res.stderr or res.stdout).strip()[-300:]
    return {"error": f"exit {res.exit_status}: {detail}"}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _run_result(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    rc = value.get("rc")
    out = {"rc": rc if isinstance(rc, int) else None,
           "stdout": str(value.get("stdout", ""))[:OUT_LIMIT],
           "stderr": str(value.get("stderr", ""))[-500:]}
    if value.get("unknown"):  # the tool hung, crashed or could not start (node_run.run)
        out["unknown"] = _printable(value["unknown"], 300)
    return out


def _time_sync(value: Any) -> dict[str, Any]:
    """node_host.time_sync's answer: tool paths and each run's (rc, stdout, stderr)."""
    doc = _dict(value)
    out: dict[str, Any] = {k: str(doc[k])[:300] if doc.get(k) else None
                           for k in ("chronyc", "timedatectl")}
    for key in ("chrony", "chrony_text", "show", "timesync"):
        if (res := _run_result(doc.get(key))) is not None:
            out[key] = res
    return out


def _printable(value: Any, limit: int) -> str:
    return "".join(c if c.isprintable() else "?" for c in str(value)[:limit])


def _global_env(value: Any) -> dict[str, Any]:
    """node_host.global_env's answer with every name a plain NCCL_/CUDA_ name and every
    value short and printable (the node's files are not trusted)."""
    doc = _dict(value)
    entries = []
    for e in doc.get("entries") or []:
        if not isinstance(e, dict) or not _ENV_NAME.match(str(e.get("name", ""))):
            continue
        line = e.get("line")
        entries.append({"name": str(e["name"]), "value": _printable(e.get("value", ""), 256),
                        "file": _printable(e.get("file", ""), 200),
                        "line": line if isinstance(line, int) else None,
                        "truncated": e.get("truncated") is True,
                        "dynamic": e.get("dynamic") is True})
    manager = _dict(doc.get("manager"))
    return {"entries": entries[:100], "more": _count(doc.get("more")),
            "scripts_skipped": _count(doc.get("scripts_skipped")),
            "manager": {"tool": _printable(manager["tool"], 300) if manager.get("tool")
                        else None, "rc": manager.get("rc"),
                        "error": _printable(manager.get("error") or "", 300)}}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def parse(host: str, doc: dict[str, Any]) -> Probe:
    """Keep what has the expected shape; drop entries whose names are not plain names."""
    rdma = tuple(p for p in doc.get("rdma") or [] if isinstance(p, dict)
                 and _NAME.match(str(p.get("device", ""))) and str(p.get("port", "")).isdigit())
    interfaces = {k: v for k, v in _dict(doc.get("interfaces")).items()
                  if _NAME.match(k) and isinstance(v, dict)}
    sysctl = {k: v for k, v in _dict(doc.get("sysctl")).items() if isinstance(v, dict)}
    roce = _dict(doc.get("roce"))
    roce["netdevs"] = {k: v for k, v in _dict(roce.get("netdevs")).items()
                       if _NAME.match(k) and isinstance(v, dict)}
    torch = doc.get("torch")
    connection = tuple(str(a) for a in doc.get("connection_address") or [] if isinstance(a, str))
    nccl = doc.get("nccl_conf")
    return Probe(host=host, hostname=str(doc.get("hostname", "")),
                 python=str(doc.get("python", "")), nvidia=_dict(doc.get("nvidia")), rdma=rdma,
                 interfaces=interfaces, sysctl=sysctl, shm=_dict(doc.get("shm")), roce=roce,
                 torch=torch if isinstance(torch, dict) else None, connection=connection,
                 nccl_conf=nccl if isinstance(nccl, dict) and isinstance(nccl.get("content"), str)
                 else None, time_sync=_time_sync(doc.get("time_sync")),
                 global_env=_global_env(doc.get("global_env")),
                 kernel=_version(doc.get("kernel")), ofed=_version(doc.get("ofed")),
                 ofed_unknown=str(doc["ofed_unknown"])[:200]
                 if isinstance(doc.get("ofed_unknown"), str) else None,
                 hca_firmware={k: v for k, v in _dict(doc.get("hca_firmware")).items()
                               if _NAME.match(k) and _version(v)})


_VERSION = re.compile(r"^[A-Za-z0-9_.:+~()-]{1,120}$")


def _version(value: object) -> str | None:
    """A version string as a node reported it, or None where it is not a plain one."""
    return value if isinstance(value, str) and _VERSION.match(value) else None
