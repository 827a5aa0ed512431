"""Slurm's node and job state from sinfo's and squeue's text columns, for a Slurm whose
``--json`` does not work (before 21.08, or built without the JSON serializer plugin).

JSON stays the interface whenever Slurm has it (:mod:`nodetune.slurm.state` says
why: a drain reason is free text). Read from text, a reason could hold a newline
and a line shaped like another node's row, so the rows are checked against a
listing with no free text in it (node names and states only): the same number
of rows, each starting with the same node. Any difference is refused, never
guessed at.

sinfo's ``%T`` writes a node's state as one word (``drained``, ``draining``,
``down*``); it is mapped to the base state and flags the JSON reports
(``idle+drain``, ``mixed+drain``, ``down``), the suffix of a node not
responding (``*``) or powered down (``~``...) dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from nodetune.slurm.state import HOLDING, SlurmNode

SINFO_NAMES = ("sinfo", "--noheader", "--Node", "--format=%N %T")
SINFO_ROWS = ("sinfo", "--noheader", "--Node", "--format=%N|%T|%E")
SQUEUE_ROWS = ("squeue", "--noheader", "--format=%i %T %N")

# What sinfo/squeue print when --json is not there: an option older Slurm does not know,
# or a Slurm built without the JSON serializer / data_parser plugins.
_NO_JSON = ("unrecognized option", "invalid option", "unknown option", "serializer/json",
            "data_parser", "unable to find plugin")
_SUFFIX = re.compile(r"[*~#%!@^$-]+$")
_STATES = {"drained": "idle+drain", "draining": "mixed+drain", "drain": "idle+drain",
           "failing": "allocated+fail", "alloc": "allocated", "idle": "idle"}


def json_missing(stderr: str) -> bool:
    """Whether a failed ``sinfo --json``/``squeue --json`` says this Slurm has no JSON."""
    text = stderr.lower()
    return any(k in text for k in _NO_JSON)


def state_of(word: str) -> str:
    """sinfo's ``%T`` word as base state and flags: ``drained`` -> ``idle+drain``."""
    base = _SUFFIX.sub("", word.strip().lower())
    return _STATES.get(base, base)


def parse_nodes(names: str, rows: str) -> dict[str, SlurmNode]:
    """Every node from :data:`SINFO_ROWS`' output, checked row by row against
    :data:`SINFO_NAMES`' (a node in several partitions has a row in each).

    Raises:
        ValueError: the two listings disagree (a reason holding a newline, or a node
            that came or went between them).
    """
    safe = [ln.split(" ", 1) for ln in names.splitlines() if ln.strip()]
    lines = rows.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != len(safe):
        raise ValueError(f"`sinfo` printed {len(lines)} node rows with reasons but "
                         f"{len(safe)} without: a reason holds a line break, which sinfo's "
                         "text cannot carry safely (a Slurm with --json can)")
    found: dict[str, SlurmNode] = {}
    for (name, *_), line in zip(safe, lines, strict=True):
        head, sep, rest = line.partition("|")
        state, sep2, reason = rest.partition("|")
        if head != name or not sep or not sep2:
            raise ValueError(f"`sinfo` row {line!r} is not node {name!r}'s")
        found[name] = SlurmNode(name=name, state=state_of(state),
                                reason="" if reason == "none" else reason)
    return found


def parse_jobs(text: str) -> dict[str, tuple[str, ...]]:
    """The ids of the jobs holding each node, from :data:`SQUEUE_ROWS`' output (no free text:
    job id, state, node list)."""
    held: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[1].upper() not in HOLDING:
            continue
        for node in expand(parts[2]):
            held.setdefault(node, []).append(parts[0])
    return {node: tuple(dict.fromkeys(ids)) for node, ids in held.items()}


def expand(hostlist: str) -> list[str]:
    """A Slurm host list as names: ``n[1-3,7],gpu-[08-09]`` -> n1 n2 n3 n7 gpu-08 gpu-09."""
    return [name for part in _split_top(hostlist) for name in _expand_one(part)]


def _split_top(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            if text[start:i]:
                yield text[start:i]
            start = i + 1
    if text[start:] and text[start:] != "(null)":
        yield text[start:]


def _expand_one(name: str) -> Iterator[str]:
    match = re.search(r"\[([^\]]*)\]", name)
    if not match:
        yield name
        return
    head, tail = name[:match.start()], name[match.end():]
    for item in match.group(1).split(","):
        low, _, high = item.partition("-")
        numbers = [low] if not high else [
            str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
        for n in numbers:
            yield from _expand_one(f"{head}{n}{tail}")
