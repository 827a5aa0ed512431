"""The processes one run started on the controller, found by a mark, so that none outlives it.

ansible-core 2.19 starts each worker in a session of its own, so killing
ansible-playbook's process group (what ansible-runner does on cancel or timeout)
leaves a running task's processes behind: an ``ssh`` still driving a node, or a
local ``command``. Parentage cannot find them reliably: once ansible-playbook
is killed its workers belong to init, and a worker that had not yet left
ansible-playbook's group when the run was stopped was never seen in its own.

So every process of a run carries one environment variable with a value of
its own (:attr:`RunMark.env`, given to ansible-playbook), inherited by the
workers, the modules and whatever they start. :meth:`RunMark.end` finds them in
/proc when the run is stopped and ends them through pidfds, so a pid reused in
between is never touched. Nothing is read while the run goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
MARK_NAME = "NODETUNE_RUN_MARK"


class RunMark:
    """One run's mark, and the processes on this machine that carry it."""

    def __init__(self, *, proc: Path = PROC) -> None:
        self.value = secrets.token_hex(12)
        self._proc = proc
        self._entry = f"{MARK_NAME}={self.value}".encode()

    @property
    def env(self) -> dict[str, str]:
        """The environment entry the run's first process is started with."""
        return {MARK_NAME: self.value}

    def _carries(self, pid: int) -> bool:
        try:
            environ = (self._proc / str(pid) / "environ").read_bytes()
        except OSError:  # gone, or not ours to read (a zombie reads as empty)
            return False
        return self._entry in environ.split(b"\0")

    def pids(self) -> list[int]:
        """Processes now carrying the mark, this one excluded."""
        if not self._proc.is_dir():
            return []
        own = os.getpid()
        return sorted(pid for d in self._proc.iterdir()
                      if d.name.isdigit() and (pid := int(d.name)) != own and self._carries(pid))

    def _signal(self, pids: list[int], sig: signal.Signals) -> None:
        own_group = os.getpgrp()
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if not self._carries(pid):
                    continue  # the pid was reused before we held it
                with contextlib.suppress(OSError):
                    group = os.getpgid(pid)
                    # A marked group leader: its group may hold processes that dropped
                    # the environment (sudo); the leader's pidfd pins the group id.
                    if group == pid and group != own_group:
                        os.killpg(group, sig)
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, sig)
            finally:
                os.close(fd)

    def end(self, *, grace: float = 3.0) -> list[int]:
        """SIGTERM every marked process, SIGKILL what is left after ``grace``.

        Returns:
            The processes that had to be ended.
        """
        found = self.pids()
        if not found:
            return []
        self._signal(found, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while (left := self.pids()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            self._signal(left, signal.SIGKILL)
        log.warning("ended %d process(es) the stopped run left running: %s",
                    len(found), ", ".join(map(str, found)))
        return found
