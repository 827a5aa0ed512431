"""The controller's own child processes, read from /proc, so that none outlives a stopped run.

ansible-core 2.19 starts each worker in a session of its own, so killing
ansible-playbook's process group (what ansible-runner does on cancel or timeout)
leaves a running task's processes behind: an ``ssh`` still driving a node, or a
local ``command``. :class:`Descendants` remembers every process group below this
process while a run goes on and ends those still there when the run is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")

# (pid, start time in clock ticks): a pid that was reused is another process.
_Proc = tuple[int, int]


def _stat(pid_dir: Path) -> tuple[int, int, int, int] | None:
    """(pid, ppid, pgid, start time) of one /proc entry, or None if it is gone or unreadable."""
    try:
        raw = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or ')'; fields follow the last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return int(pid_dir.name), int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _table(proc: Path) -> list[tuple[int, int, int, int]]:
    return [s for d in proc.iterdir() if d.name.isdigit() and (s := _stat(d)) is not None]


class Descendants:
    """Process groups of the processes below ``root`` (default: this process), as last seen."""

    def __init__(self, root: int | None = None, *, proc: Path = PROC) -> None:
        self._root = os.getpid() if root is None else root
        self._proc = proc
        self._own_group = os.getpgid(self._root) if root is None else -1
        self.groups: dict[int, set[_Proc]] = {}

    def refresh(self) -> None:
        """Add the groups of every process now below ``root``; groups seen earlier are kept."""
        if not self._proc.is_dir():
            return
        table = _table(self._proc)
        children: dict[int, list[tuple[int, int, int, int]]] = {}
        for entry in table:
            children.setdefault(entry[1], []).append(entry)
        todo = [self._root]
        while todo:
            for pid, _ppid, pgid, start in children.get(todo.pop(), []):
                todo.append(pid)
                if pgid not in (self._own_group, 0, 1):
                    self.groups.setdefault(pgid, set()).add((pid, start))

    def alive(self) -> list[int]:
        """Groups seen earlier that still hold a process seen in them (not a reused pid)."""
        if not self._proc.is_dir():
            return []
        now = {(pid, start): pgid for pid, _ppid, pgid, start in _table(self._proc)}
        return sorted(g for g, members in self.groups.items()
                      if any(now.get(m) == g for m in members))

    def end(self, *, grace: float = 3.0) -> list[int]:
        """SIGTERM every group still alive, SIGKILL what is left after ``grace``.

        Returns:
            The groups that had to be ended.
        """
        groups = self.alive()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for group in groups:
                with contextlib.suppress(OSError):
                    os.killpg(group, sig)
            deadline = time.monotonic() + grace
            while sig == signal.SIGTERM and self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.alive():
                break
        if groups:
            log.warning("ended %d process group(s) the stopped run left running: %s",
                        len(groups), ", ".join(map(str, groups)))
        return groups
