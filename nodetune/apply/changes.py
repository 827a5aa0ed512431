"""What an apply changed, one line per file or setting, for the summary shown without --diff.

A changed task's diff names what it touched in its ``+++`` header (a file path,
``/proc/sys`` for sysctl settings, ``dnf versionlock list``); sysctl and module
diffs name each setting on their ``+`` lines. The same change on many hosts is
one line with a host count, so 500 nodes read like one.
"""

from __future__ import annotations

import re
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

    def line(self, total: int = 0) -> str:
        """``TARGET  [task]  on WHERE``; WHERE is "all N hosts" when ``total`` hosts ran."""
        task = f"  [{self.task}]" if self.task != self.target else ""
        n = len(self.hosts)
        if total > 1 and n == total:
            return f"{self.target}{task}  on all {n} hosts"
        names = ", ".join(sorted(self.hosts)[:SHOWN_HOSTS])
        more = f" +{n - SHOWN_HOSTS} more" if n > SHOWN_HOSTS else ""
        return f"{self.target}{task}  on {n} host{'s' if n != 1 else ''}: {names}{more}"


def targets_of(diff: str) -> list[str]:
    """The files or settings a unified diff (:func:`~nodetune.ansible.events.render_diff`'s
    text) touches.

    A file is named by its ``+++`` header. Under ``/proc`` (sysctl, loaded
    modules) each added line is a setting: its key (``net.core.rmem_max``) is
    the target, so a line per setting. A diff without a header of its own
    (``+++ after``) names the ``"path"`` its JSON holds (a directory made) or,
    failing that, each added line (``eth1 mtu 9000``).
    """
    out: list[str] = []
    for header, body in _sections(diff):
        if header.startswith("/proc"):
            out += [f"{_key(ln)} ({header})" for ln in _added(body)]
        elif header not in ("after", ""):
            out.append(header)
        else:
            paths = [m.group(1) for ln in body if (m := _PATH.match(ln[1:]))]
            out += paths or [ln[1:].strip() for ln in _added(body)]
    if not out and diff.strip():
        out.append(diff.strip().splitlines()[0][:120])
    return list(dict.fromkeys(t[:160] for t in out))


_PATH = re.compile(r'\s*"(?:path|dest)": "([^"]+)"')


def _sections(diff: str) -> list[tuple[str, list[str]]]:
    """(``+++`` header, the lines after it) for each file of a unified diff."""
    out: list[tuple[str, list[str]]] = []
    for line in diff.splitlines():
        if line.startswith("+++ "):
            out.append((line[4:].strip(), []))
        elif out and not line.startswith(("--- ", "@@")):
            out[-1][1].append(line)
    return out


def _added(body: list[str]) -> list[str]:
    return [ln for ln in body if ln.startswith("+") and ln[1:].strip()]


def _key(line: str) -> str:
    return line[1:].split("=", 1)[0].strip()


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
