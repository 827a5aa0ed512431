"""The line protocol between the worker on a node and the controller that started it.

Every machine-readable line the worker prints is ``@@nodetune `` followed by
one JSON object with an ``"event"`` name; everything else on the stream (NCCL's
log, Python warnings, tracebacks) is plain text for the run's log. This module
is the protocol's one definition. It is stdlib-only and Python 3.8-compatible
because it is uploaded to each node beside the worker (as ``nodetune_protocol.py``)
and imported there, while the controller imports it from the package.
(Annotations are strings here, so ``dict[str, Any] | None`` costs 3.8 nothing.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MARK = "@@nodetune "
# The environment variable that marks every process of one run (for the reaper): a copy of
# nodetune.remote.session.RUN_VAR, as this file runs without the package.
RUN_VAR = "NODETUNE_RUN_ID"
# The collectives ``measure`` times (--collective), named as torch.distributed and
# nccl-tests (<name>_perf) name them.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


def encode(event: str, **fields: object) -> str:
    """One protocol line (with its newline) for ``event`` and its fields."""
    doc = dict(fields)
    doc["event"] = event
    return MARK + json.dumps(doc, sort_keys=True) + "\n"


def decode(line: str) -> dict[str, Any] | None:
    """The event of a protocol line; None for any other line, a torn or garbled one included.

    Never raises: a node's output is not trusted to be well formed.
    """
    if not line.startswith(MARK):
        return None
    try:
        doc = json.loads(line[len(MARK):])
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("event"), str):
        return None
    return doc


def last_events(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The last event of each kind among ``lines`` (for short commands: probe, reap)."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        doc = decode(line)
        if doc is not None:
            out[doc["event"]] = doc
    return out
