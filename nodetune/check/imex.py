"""``gpu.imex``: the IMEX domain of a multi-node NVLink system, as this node sees it.

Where ``nvidia-imex-ctl`` is installed, the health reader runs ``nvidia-imex-ctl -N -j``:
"-N: Gets the full status of the entire IMEX domain", "-j: Output of the -n/-N command
will be in JSON" (NVIDIA IMEX Service for NVLink Networks User's Guide, "IMEX Service
Command Service", https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/
cmdservice.html, read 2026-11-29). The JSON, as NVIDIA's own validation suite reads it
(github.com/NVIDIA/ai-cloud-validation isvctl/configs/providers/aws/scripts/network/
imex_domain_test.py, confirmed there against live domains, read 2026-11-29)::

    {"nodes": {"0": {"status": "READY", "host": "10.0.0.1", "connections": {...}, ...},
               "1": {"status": "UNAVAILABLE", "host": "10.0.0.2", ...}},
     "timestamp": "9/4/2026 00:37:39.905", "status": "UP"}

and the tool exits 255 when it cannot read its node configuration. The domain ``UP`` with
every node ``READY`` passes; ``UP`` with a node in another state warns, naming it; any
other domain status (``DOWN``) fails; an exit other than 0 or an answer that is not that
JSON warns with the tool's words (not assessed is not good). Without the tool: skipped,
"no IMEX on this node".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "gpu.imex"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.imex",
     "nvidia-imex-ctl -N -j: IMEX domain UP, every node READY (DOWN fails);",
     'no nvidia-imex-ctl: skip ("no IMEX on this node")'),
)
SOURCE = ("nvidia-imex-ctl -N -j (NVIDIA IMEX guide, Command Service; NVIDIA/ai-cloud-"
          "validation imex_domain_test.py, read 2026-11-29)")


def judge(imex: Mapping[str, Any] | None) -> CheckResult:
    """The domain's status and its nodes' from ``nvidia-imex-ctl -N -j``."""
    if not imex or not imex.get("tool"):
        return skipped(NAME, "no IMEX on this node (no nvidia-imex-ctl)", source=SOURCE)
    expected = "domain UP, every node READY"
    if imex.get("unknown"):  # hung or crashed: not assessed
        return unknown(NAME, f"nvidia-imex-ctl -N -j: {imex['unknown']}", expected=expected,
                       source=SOURCE)
    if imex.get("rc") != 0:
        words = str(imex.get("stderr") or imex.get("stdout") or "").strip().splitlines()
        return warned(NAME, f"exit {imex.get('rc')}", expected, SOURCE,
                      "nvidia-imex-ctl -N -j gave no domain status (exit "
                      f"{imex.get('rc')}{': ' + words[-1][:200] if words else ''})")
    try:
        doc = json.loads(str(imex.get("stdout") or ""))
    except ValueError:
        doc = None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(nodes, dict):
        return warned(NAME, "not its JSON", expected, SOURCE,
                      "nvidia-imex-ctl -N -j answered something other than its JSON")
    status = str(doc.get("status") or "?")[:40]
    entries = [n for n in nodes.values() if isinstance(n, dict)]
    ready = sum(1 for n in entries if n.get("status") == "READY")
    measured = f"domain {status}, {ready}/{len(entries)} nodes READY"
    others = [f"{str(n.get('hostName') or n.get('host') or '?')[:64]} "
              f"{str(n.get('status') or '?')[:40]}" for n in entries
              if n.get("status") != "READY"]
    if status != "UP":
        return failed(NAME, measured, expected, SOURCE, f"IMEX domain is {status}"
                      + (f": {', '.join(others)}" if others else ""))
    if others:
        return warned(NAME, measured, expected, SOURCE, "IMEX nodes not READY: "
                      + ", ".join(others))
    return passed(NAME, measured, expected, SOURCE)


def judge_signal(read: SignalRead) -> Judged:
    """gpu.imex from the reader's nvidia-imex-ctl run."""
    return Judged((judge(read.section("imex")),))
