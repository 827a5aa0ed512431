"""What an apply changed, one line per file or setting, for the summary shown without --diff.

A changed task's diff names what it touched in its ``+++`` header (a file path,
``/proc/sys`` for sysctl settings, ``dnf versionlock list``); sysctl and module
diffs name each setting on their ``+`` lines. The same change on many hosts is
one line with a host count, so 500 nodes read like one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nodetune.ansible.results import TaskOutcome

SHOWN_HOSTS = 3  # host names listed on a line before "+N more"


@dataclass(slots=True)
class Change:
    """One file or setting a task changed, and the hosts it changed on."""

    target: str
    task: str
    hosts: list[str] = field(default_factory=list)

    def line(self) -> str:
        names = ", ".join(sorted(self.hosts)[:SHOWN_HOSTS])
        more = f" +{len(self.hosts) - SHOWN_HOSTS} more" if len(self.hosts) > SHOWN_HOSTS else ""
        where = f"{len(self.hosts)} host{'s' if len(self.hosts) != 1 else ''}"
        return f"{self.target}  [{self.task}]  {where}: {names}{more}"


def targets_of(diff: str) -> list[str]:
    """The files or settings a unified diff (:func:`render_diff`'s text) touches.

    A file is named by its ``+++`` header. Under ``/proc`` (sysctl, loaded
    modules) each added line is a setting: its key (``net.core.rmem_max``) is
    the target, so a line per setting.
    """
    out: list[str] = []
    header = ""
    for line in diff.splitlines():
        if line.startswith("+++ "):
            header = line[4:].strip()
            if not header.startswith("/proc"):
                out.append(header)
        elif header.startswith("/proc") and line.startswith("+") and line[1:].strip():
            key = line[1:].split("=", 1)[0].strip()
            out.append(f"{key} ({header})")
    if not out and diff.strip():
        out.append(diff.strip().splitlines()[0][:120])
    return list(dict.fromkeys(out))


def summarize(changed: Iterable[TaskOutcome]) -> list[Change]:
    """The changes of ``changed`` grouped by (target, task), in first-seen order.

    A changed task without a diff counts under the file its result names (``dest``,
    ``path``), else (a package, a service) under its task name.
    """
    grouped: dict[tuple[str, str], Change] = {}
    for t in changed:
        for target in targets_of(t.diff) or [t.target or t.task]:
            change = grouped.setdefault((target, t.task), Change(target=target, task=t.task))
            if t.host not in change.hosts:
                change.hosts.append(t.host)
    return list(grouped.values())
