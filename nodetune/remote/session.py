"""Sessions of one shape for every transport, and the one way a command line is built.

Every command sent to a node is built from an argument list and ``shlex.quote``d
(:func:`shell_command`); the SSH session (:mod:`nodetune.remote.ssh`) and the local one
here run that same shell string. Only the string is shared: a host with
``ansible_connection: local`` runs it under ``/bin/sh`` on this machine, with no SSH,
no host-key check, and uploads as plain file writes, so only SSH hosts (the lab's
nodes) take the SSH code path.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nodetune.errors import InputError, NodeTimeout, SSHError
from nodetune.remote.ssh_config import ConnectSpec

log = logging.getLogger(__name__)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A run's id as new_run_id makes it (uuid4's hex, 32 digits): what marks its processes, dirs,
# containers and Slurm job. collective/worker/reaper.py, shipped to nodes within the one-file
# worker, holds a copy (tests/unit/test_run_id.py keeps the two one rule).
RUN_ID = re.compile(r"^[0-9a-f]{32}\Z")  # \Z: no trailing newline, as $ would take
# The environment variable that carries the run's id on each of its processes (what the
# worker's reaper kills by). measure/protocol.py, shipped to nodes alone, holds a copy
# (tests/unit/test_run_id.py keeps the two one name).
RUN_VAR = "NODETUNE_RUN_ID"


def new_run_id() -> str:
    """A fresh run id (:data:`RUN_ID`): nodetune makes run ids here only."""
    import uuid  # only a run that launches imports it (not the health check)

    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a finished command left behind."""

    exit_status: int
    stdout: str
    stderr: str


def shell_command(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> str:
    """One POSIX shell command line for ``argv``: every word quoted, nothing interpolated.

    Raises:
        InputError: an environment variable name that is not a shell identifier.
    """
    if not argv:
        raise InputError("empty command")
    words: list[str] = []
    if env:
        bad = [k for k in env if not ENV_NAME.match(k)]
        if bad:
            raise InputError(f"environment variable name {bad[0]!r} is not valid")
        words += ["env", *(f"{k}={v}" for k, v in env.items())]
    line = shlex.join([*words, *argv])
    return f"cd {shlex.quote(cwd)} && exec {line}" if cwd else line


class Process(Protocol):
    """A started command whose combined stdout/stderr is read line by line."""

    def lines(self) -> Iterator[str]:
        """Output lines until the command closes its output."""
        ...

    def poll(self) -> int | None:
        """Exit status, or None while it runs."""
        ...

    def send(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin.

        Raises:
            OSError: the command or the connection is gone.
        """
        ...

    def close(self) -> None:
        """Close our end: the command sees EOF on stdin."""
        ...


class Session(Protocol):
    """Commands, uploads and process-group cleanup on one host."""

    spec: ConnectSpec

    def run(self, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        """Run to completion.

        Raises:
            NodeTimeout: not finished within ``timeout`` seconds.
        """
        ...

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        """Start without waiting; stdin stays open until :meth:`Process.close`."""
        ...

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` on the host."""
        ...

    def close(self) -> None:
        """Drop the connection."""
        ...


# --- local --------------------------------------------------------------------------


class _LocalProcess:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def lines(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            yield raw.decode(errors="replace").rstrip("\r\n")

    def poll(self) -> int | None:
        return self._proc.poll()

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()


class LocalSession:
    """Runs the same shell command lines on this machine (``ansible_connection: local``)."""

    def __init__(self, spec: ConnectSpec) -> None:
        self.spec = spec

    def run(self, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s(local)$ %s", self.spec.host, command)
        try:
            proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True,
                                  timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise NodeTimeout(f"`{argv[0]}` did not finish within {timeout:.0f} s",
                                host=self.spec.host) from None
        return CommandResult(proc.returncode, proc.stdout.decode(errors="replace"),
                             proc.stderr.decode(errors="replace"))

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s(local)$ %s &", self.spec.host, command)
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return _LocalProcess(proc)

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        try:
            target = Path(path)
            target.write_bytes(data)
            os.chmod(target, mode)
        except OSError as exc:
            raise SSHError(f"cannot write {path}: {exc}", host=self.spec.host) from exc

    def close(self) -> None:
        return None


