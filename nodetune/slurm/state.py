"""Slurm's node and job state as slurmctld reports it: ``sinfo --json``, ``squeue --json``.

JSON and not sinfo's text columns: a drain reason is free text that anyone
with ``scontrol`` writes, and a reason holding a newline and a line shaped
like another node's row would pass for that node in any line format. In JSON
a reason is one string inside its own node.

Two shapes are read: Slurm 22.05's (OpenAPI v0.0.38: ``state`` is a word,
``state_flags`` a list, ``reason_changed_at`` epoch seconds, a job's nodes in
``job_resources.allocated_nodes[].nodename``) and the later one (``state`` a
list of words, times as ``{"set": .., "number": ..}``, a job's nodes in
``job_resources.nodes.allocation[].name``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

SINFO = ("sinfo", "--json")
SQUEUE = ("squeue", "--json")
# Flags of a node out of service (e.g. "idle+drain").
_OUT_OF_SERVICE = frozenset({"drain", "down", "fail"})
# Base states of a node that runs jobs: all of it, or part of it.
_BUSY = frozenset({"allocated", "mixed"})
# Job states (base state or flag) in which a job still holds its nodes; squeue's JSON
# also lists jobs that ended within MinJobAge (CANCELLED, COMPLETED, ...).
HOLDING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "SIGNALING",
                      "STAGE_OUT", "RESIZING"})


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """A node as slurmctld reports it."""

    name: str
    state: str                        # base state and flags, lower case: "idle+drain"
    reason: str = ""                  # "" when Slurm has none
    reason_time: float | None = None  # when the reason was set (epoch seconds), if known
    # LastBusyTime: when slurmctld last saw the node hold a job (epoch seconds), if known;
    # it moves when a job on the node ends (scontrol(1), LastBusyTime: "the last time the
    # node was busy (i.e. last time the node had jobs on it)", read 2026-11-29)
    last_busy: float | None = None

    @property
    def flags(self) -> frozenset[str]:
        """The state's words: {"idle", "drain"}."""
        return frozenset(self.state.lower().replace("*", "").split("+"))

    @property
    def out_of_service(self) -> bool:
        """Drained, draining, down or failed."""
        return bool(self.flags & _OUT_OF_SERVICE)

    @property
    def busy(self) -> bool:
        """Allocated to jobs, wholly or in part (ALLOCATED or MIXED)."""
        return bool(self.flags & _BUSY)

    @property
    def display_state(self) -> str:
        """The state as ``scontrol show node`` writes it: IDLE+DRAIN."""
        return self.state.upper()


def _document(text: str, command: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"`{command}` did not print JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"`{command}` printed JSON that is not an object")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        raise ValueError(f"`{command}` reported: {_error_text(errors[0])}")
    return doc


def _error_text(error: object) -> str:
    if isinstance(error, Mapping):
        return str(error.get("error") or error.get("description") or error)
    return str(error)


def _words(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [str(v) for v in value if v]
    return []


def _epoch(value: object) -> float | None:
    """A time as 22.05 writes it (a number) or later Slurm (``{"set": true, "number": n}``)."""
    if isinstance(value, Mapping):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Every node in ``sinfo --json``'s output, by name.

    Raises:
        ValueError: not sinfo's JSON, or Slurm reported an error in it.
    """
    doc = _document(text, "sinfo --json")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise ValueError("`sinfo --json` printed no node list")
    found: dict[str, SlurmNode] = {}
    for node in nodes:
        if not isinstance(node, Mapping) or not isinstance(node.get("name"), str):
            continue
        words = [*_words(node.get("state")), *_words(node.get("state_flags"))]
        reason = node.get("reason")
        found[node["name"]] = SlurmNode(
            name=node["name"], state="+".join(dict.fromkeys(w.lower() for w in words)),
            reason=reason if isinstance(reason, str) else "",
            reason_time=_epoch(node.get("reason_changed_at")),
            last_busy=_epoch(node.get("last_busy")))
    return found


def parse_jobs(text: str) -> dict[str, tuple[str, ...]]:
    """The ids of the jobs holding each node (running, suspended, completing...), from
    ``squeue --json``'s output.

    Raises:
        ValueError: not squeue's JSON, or Slurm reported an error in it.
    """
    doc = _document(text, "squeue --json")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("`squeue --json` printed no job list")
    held: dict[str, list[str]] = {}
    for job in jobs:
        if not isinstance(job, Mapping) or job.get("job_id") is None:
            continue
        if not HOLDING & {w.upper() for w in _words(job.get("job_state"))}:
            continue
        for node in _allocated(job.get("job_resources")):
            held.setdefault(node, []).append(str(job["job_id"]))
    return {node: tuple(dict.fromkeys(ids)) for node, ids in held.items()}


def _allocated(resources: object) -> Iterator[str]:
    """Node names a job holds, one by one (no host list expression to expand)."""
    if not isinstance(resources, Mapping):
        return
    entries: object = resources.get("allocated_nodes")  # 22.05
    key = "nodename"
    nodes = resources.get("nodes")
    if entries is None and isinstance(nodes, Mapping):  # later Slurm
        entries, key = nodes.get("allocation"), "name"
    if isinstance(entries, Mapping):
        entries = list(entries.values())
    if not isinstance(entries, list):
        return
    for entry in entries:
        if isinstance(entry, Mapping) and isinstance(entry.get(key), str):
            yield entry[key]
