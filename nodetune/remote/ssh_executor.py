"""The executor (:mod:`nodetune.remote.executor`) over one session per node: SSH
(:mod:`nodetune.remote.ssh`), or this machine for ``ansible_connection: local``.

Each operation is the session's own call, unchanged: a command is run or started as the
session runs it (one quoted shell line), a file is uploaded, and a command past its
timeout is the error :data:`~nodetune.remote.executor.RULES` gives its stage, naming
the node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.errors import NodeTimeout
from nodetune.remote import ssh
from nodetune.remote.executor import OVER_SSH, Command, NodeRunner, Ran, Stage, Stream, hung
from nodetune.remote.session import CommandResult, Session

log = logging.getLogger(__name__)


class SshExecutor:
    """Commands on the nodes of ``sessions`` (inventory name: its open session)."""

    where = OVER_SSH

    def __init__(self, sessions: Mapping[str, Session]) -> None:
        self.sessions = dict(sessions)
        self.started: dict[str, list[Stream]] = {}

    def _session_run(self, node: str, command: Command, *, timeout: float) -> CommandResult:
        """``command`` as ``node``'s session runs it (its environment and directory only
        where given)."""
        kw: dict[str, Any] = {}
        if command.env:
            kw["env"] = command.env
        if command.cwd:
            kw["cwd"] = command.cwd
        return self.sessions[node].run(list(command.argv), timeout=timeout, **kw)

    def run_one(self, node: str, command: Command, *, timeout: float, stage: Stage,
                what: str) -> CommandResult:
        """``command`` on ``node``, to its end (:meth:`run` of one node, as the session
        answers it)."""
        try:
            return self._session_run(node, command, timeout=timeout)
        except NodeTimeout as exc:
            raise hung(stage, exc, what, host=node) from None

    def run_node(self, node: str, command: Command, *, timeout: float) -> Ran:
        """``command`` on ``node``, to its end; past ``timeout`` the session's own
        ``NodeTimeout`` (naming the node), a lost connection its ``SSHError``."""
        return _ran(self._session_run(node, command, timeout=timeout))

    def run(self, commands: Mapping[str, Command], *, name: str, timeout: float,
            stage: Stage, what: str) -> dict[str, Ran]:
        """Each node's command, one after the other (``name`` is srun's alone)."""
        out = {}
        for node, command in commands.items():
            out[node] = _ran(self.run_one(node, command, timeout=timeout, stage=stage,
                                          what=what))
        return out

    def start(self, commands: Mapping[str, Command], *, name: str) -> dict[str, Stream]:
        """Each node's command, started by its session (in ``Command.cwd``, if given)."""
        out: dict[str, Stream] = {}
        for node, command in commands.items():
            out[node] = self.sessions[node].start(list(command.argv), env=command.env or None,
                                                  cwd=command.cwd)
            self.started.setdefault(node, []).append(out[node])
        return out

    def make_workdir(self, node: str, command: Command, *, timeout: float) -> CommandResult:
        """Run ``command``, which makes ``node``'s own directory for the run (``mktemp
        -d``: one per node, so runs never share files) and prints it, as the session
        answers it; the caller reads and checks the path."""
        return self._session_run(node, command, timeout=timeout)

    def stage_one(self, node: str, files: Mapping[str, bytes], workdir: str) -> None:
        """Upload ``files`` into ``workdir`` on ``node``, one after the other."""
        session = self.sessions[node]
        for name, data in files.items():
            session.upload(data, f"{workdir}/{name}")

    def stage(self, files: Mapping[str, bytes], workdir: str) -> None:
        for node in self.sessions:
            self.stage_one(node, files, workdir)

    def stop_one(self, node: str) -> None:
        """Close the stdin of what was started on ``node`` (its launch guard then stops
        its ranks); a channel that is already gone is no error."""
        for stream in self.started.get(node, ()):
            try:
                stream.close()
            except Exception as exc:  # closing a dead channel must not stop the cleanup
                log.debug("%s: closing the worker's channel: %s", node, exc)

    def stop(self) -> None:
        for node in list(self.started):
            self.stop_one(node)

    def add(self, host: Host, *, accept_new_host_keys: bool, timeout: float) -> NodeRunner:
        """Open ``host``'s session (:func:`nodetune.remote.ssh.connect`: a local one for
        ``ansible_connection: local``) and take the node in: its commands from now on.

        Raises:
            SSHError: the node cannot be reached.
        """
        self.sessions[host.name] = ssh.connect(host, accept_new_host_keys=accept_new_host_keys,
                                               timeout=timeout)
        return NodeRunner(self, host.name)

    def reconnect(self, node: str, host: Host, *, timeout: float) -> None:
        """Drop ``node``'s session and open a fresh one to ``host`` (a wedged channel, a
        dropped connection), its host key checked against known_hosts (where the first
        connection was allowed to, it recorded a new one there).

        Raises:
            SSHError: the node cannot be reached.
        """
        self.close_one(node)
        self.sessions[node] = ssh.connect(host, timeout=timeout)

    def close_one(self, node: str) -> None:
        """Close ``node``'s session and let go of it (none open: nothing)."""
        session = self.sessions.pop(node, None)
        if session is not None:
            session.close()

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


def _ran(r: CommandResult) -> Ran:
    """A session's answer as the executor gives it: its lines split once."""
    return Ran(r.exit_status, r.stdout, r.stderr, tuple(r.stdout.splitlines()))


def of(runner: NodeRunner) -> SshExecutor:
    """The SSH executor ``runner`` runs through (validate's own launch and cleanup over
    SSH: under Slurm their work is the step's)."""
    over = runner.executor
    assert isinstance(over, SshExecutor), f"{runner.node}: not reached over SSH"
    return over


def over_session(node: str, session: Session) -> NodeRunner:
    """``node`` reached through ``session`` alone, as a :class:`NodeRunner` of an executor
    of its own."""
    return NodeRunner(SshExecutor({node: session}), node)


def connect(host: Host, *, accept_new_host_keys: bool, timeout: float) -> SshExecutor:
    """An executor over ``host``'s own session, once :func:`nodetune.remote.ssh.connect`
    has opened it (a local one for ``ansible_connection: local``).

    Raises:
        SSHError: the node cannot be reached.
    """
    over = SshExecutor({})
    over.add(host, accept_new_host_keys=accept_new_host_keys, timeout=timeout)
    return over


__all__ = ["SshExecutor", "connect", "of", "over_session"]
