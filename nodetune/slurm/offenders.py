"""Repeat offenders: a node nodetune drained again and again is serviced, not resumed.

A node that fails, is drained, passes a re-check, is resumed and fails again keeps
taking jobs down between the rounds. OCI's health checks and NVSentinel stop the cycle
after a few rounds and send the node to a person. Here: a node that nodetune's runs
drained at least :data:`DRAINS` times within :data:`WINDOW_DAYS` days (nodetune's own
defaults; ``--service-after N``, 0 turns the rule off) is not resumed by a passing run,
whatever else allows it; the skip says "[action: service]" and names the drains. The
drains are read from the run records themselves (``report.json``'s ``slurm.actions``:
a drain that was carried out, not a dry run), as ``nodetune runs --node NAME`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DRAINS = 3          # drains within the window that make a node a repeat offender
WINDOW_DAYS = 7.0   # the window, days back from now
VERBS = ("check", "validate")  # the runs that drain through the controller


@dataclass(frozen=True, slots=True)
class Drain:
    """One drain a run of nodetune carried out on a node."""

    run_id: str
    started: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "started": self.started, "reason": self.reason}


def _started(doc: Mapping[str, Any]) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(doc.get("started")))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def drains(node: str, docs: Iterable[Mapping[str, Any]], *, now: datetime,
           window_days: float = WINDOW_DAYS) -> list[Drain]:
    """The drains of ``node`` (inventory or Slurm name) the records carried out within
    ``window_days`` before ``now``, oldest first."""
    since = now - timedelta(days=window_days)
    found = []
    for doc in docs:
        when = _started(doc)
        slurm = doc.get("slurm")
        if when is None or when < since or not isinstance(slurm, Mapping) \
                or slurm.get("dry_run"):
            continue
        for a in slurm.get("actions") or ():
            if isinstance(a, Mapping) and a.get("action") == "drain" \
                    and not a.get("error") and not a.get("dry_run") \
                    and node in (a.get("node"), a.get("slurm_node")):
                found.append(Drain(str(doc.get("run_id", "?")), when.isoformat(),
                                   str(a.get("reason", ""))))
    return sorted(found, key=lambda d: d.started)


def of_runs(node: str, runs_dir: Path, *, now: datetime | None = None,
            window_days: float = WINDOW_DAYS) -> list[Drain]:
    """:func:`drains` over the run records under ``runs_dir``."""
    from nodetune.reports.history import load_records

    return drains(node, load_records(runs_dir, verbs=VERBS), now=now or datetime.now(UTC),
                  window_days=window_days)


def service_reason(found: list[Drain], *, after: int, window_days: float) -> str | None:
    """Why a node is serviced instead of resumed (None: it is not a repeat offender)."""
    if after <= 0 or len(found) < after:
        return None
    runs = ", ".join(d.run_id for d in found[-after:])
    return (f"drained by nodetune {len(found)} times in the last {window_days:g} days "
            f"(runs {runs}): a repeat offender, not resumed [action: service]")
