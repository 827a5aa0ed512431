"""The node probe's answer as the controller keeps it: :class:`Probe`, what has the
expected shape, every name a plain name (the node's document is not trusted).

A read of its own (a new top-level key of :mod:`nodetune.check.node_probe`'s document)
needs no field here: :func:`parse` keeps it in :attr:`Probe.sections` as the node sent it,
under a plain name and only where it is an object, and the check that reads it checks its
shape (``timesync.section``, ``global_env.section``), with :func:`run_result`,
:func:`printable` and :func:`count` for the common parts. This module imports nothing of
the package, so that every check module can take a :class:`Probe`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
OUT_LIMIT = 4000  # characters of a time tool's output kept (node_host.OUT_LIMIT)
_VERSION = re.compile(r"^[A-Za-z0-9_.:+~()-]{1,120}$")


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
    kernel: str | None = None                    # uname -r
    hca_firmware: dict[str, str] = field(default_factory=dict)  # RDMA device -> fw_ver
    ofed: str | None = None                      # ofed_info -s (None: not installed)
    ofed_unknown: str | None = None              # why ofed_info -s gave nothing (it hung)
    # Every other object of the document by its key (node_host's time_sync and global_env
    # among them), as the node sent it: the check that reads one checks its shape.
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        """The document's object ``name`` ({} where the node sent none)."""
        return self.sections.get(name, {})


# The document's keys parse() reads into fields of their own (and "probe", its version).
_READ = frozenset({f.name for f in fields(Probe)} - {"host", "sections"}
                  | {"probe", "connection_address"})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def run_result(value: Any) -> dict[str, Any] | None:
    """A tool's run as node_run's runner reports it: (rc, stdout, stderr, unknown), checked
    for type and size; None where it is not an object."""
    if not isinstance(value, dict):
        return None
    rc = value.get("rc")
    out = {"rc": rc if isinstance(rc, int) else None,
           "stdout": str(value.get("stdout", ""))[:OUT_LIMIT],
           "stderr": str(value.get("stderr", ""))[-500:]}
    if value.get("unknown"):  # the tool hung, crashed or could not start (node_run.run)
        out["unknown"] = printable(value["unknown"], 300)
    return out


def printable(value: Any, limit: int) -> str:
    """A node's value as at most ``limit`` printable characters."""
    return "".join(c if c.isprintable() else "?" for c in str(value)[:limit])


def count(value: Any) -> int:
    """A count the node reported (0 where it is not a whole number >= 0)."""
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
                 else None,
                 kernel=_version(doc.get("kernel")), ofed=_version(doc.get("ofed")),
                 ofed_unknown=str(doc["ofed_unknown"])[:200]
                 if isinstance(doc.get("ofed_unknown"), str) else None,
                 hca_firmware={k: v for k, v in _dict(doc.get("hca_firmware")).items()
                               if _NAME.match(k) and _version(v)},
                 sections={k: v for k, v in doc.items()
                           if k not in _READ and _NAME.match(k) and isinstance(v, dict)})


def _version(value: object) -> str | None:
    """A version string as a node reported it, or None where it is not a plain one."""
    return value if isinstance(value, str) and _VERSION.match(value) else None
