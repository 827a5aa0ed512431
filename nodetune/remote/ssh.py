"""SSH sessions to inventory hosts (paramiko), and :func:`connect`, which gives a host
its session: this SSH one, or for ``ansible_connection: local`` the local one of the
same shape (:mod:`nodetune.remote.session`).

Both run the same shell string (:func:`~nodetune.remote.session.shell_command`); the
rest of this module (host keys, jump hosts, SFTP uploads, channel timeouts) is taken
only by SSH hosts.
"""

from __future__ import annotations

import itertools
import logging
import re
import select
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError, NodeTimeout, SSHError
from nodetune.remote.ssh_config import (
    DEFAULT_KNOWN_HOSTS,
    LOCAL_CONNECTIONS,
    ConnectSpec,
    spec_for,
)
from nodetune.remote.ssh_inputs import SSH_CONNECTIONS, ssh_options

# ConnectSpec and spec_for live in nodetune.remote.ssh_config, ssh_options in
# nodetune.remote.ssh_inputs; they are part of this module's interface too.
__all__ = ["DEFAULT_KNOWN_HOSTS", "LOCAL_CONNECTIONS", "SSH_CONNECTIONS", "CommandResult",
           "ConnectSpec", "LocalSession", "Process", "SSHSession", "Session", "connect",
           "connect_ssh", "shell_command", "spec_for", "ssh_options"]

from nodetune.remote.session import (
    CommandResult,
    LocalSession,
    Process,
    Session,
    shell_command,
)

log = logging.getLogger(__name__)

# What a shell and `env` accept as an environment variable name.
# --- SSH ----------------------------------------------------------------------------


def _accept_new(record_in: Path | None) -> paramiko.MissingHostKeyPolicy:
    """A policy that trusts a host seen for the first time and records its key
    (``accept-new``). paramiko is imported where SSH is used, never by a node-local
    check (slurmd's HealthCheckProgram pays every import on every run)."""
    import paramiko

    class _AcceptNew(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                             key: paramiko.PKey) -> None:
            client.get_host_keys().add(hostname, key.get_name(), key)
            log.warning("%s: trusting new host key %s %s", hostname, key.get_name(),
                        key.fingerprint)
            if record_in is not None:
                record_in.parent.mkdir(parents=True, exist_ok=True)
                with record_in.open("a") as fh:
                    fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")

    return _AcceptNew()


class _SSHProcess:
    def __init__(self, channel: paramiko.Channel) -> None:
        self._chan = channel
        self._out = channel.makefile("rb")

    def lines(self) -> Iterator[str]:
        for raw in self._out:
            yield raw.decode(errors="replace").rstrip("\r\n")

    def poll(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def send(self, data: bytes) -> None:
        try:
            self._chan.sendall(data)
        except _ssh_errors() as exc:
            raise OSError(f"SSH channel closed: {exc}") from None

    def close(self) -> None:
        self._chan.close()


def _ssh_errors() -> tuple[type[BaseException], ...]:
    """What an SSH call raises when the connection fails (paramiko's, the socket's)."""
    import paramiko

    return (paramiko.SSHException, OSError, EOFError)


# What paramiko raises when sshd accepts the TCP connection and never completes the
# handshake (a frozen node): the banner timed out, or the handshake wait ran out.
_NO_BANNER = re.compile(r"Error reading SSH protocol banner|No existing session")


class SSHSession:
    """A paramiko connection to one host, and the jump hosts it goes through."""

    def __init__(self, spec: ConnectSpec, client: paramiko.SSHClient,
                 hops: Sequence[paramiko.SSHClient] = ()) -> None:
        self.spec = spec
        self._client = client
        self._hops = tuple(hops)

    def _transport(self) -> paramiko.Transport:
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise SSHError(f"SSH connection to {self.spec.describe()} dropped",
                           host=self.spec.host)
        return transport

    def _channel(self, command: str, *, timeout: float, combine: bool = False
                 ) -> paramiko.Channel:
        transport = self._transport()
        try:
            chan = transport.open_session(timeout=timeout)
            chan.set_combine_stderr(combine)
            chan.exec_command(command)
        except _ssh_errors() as exc:
            raise SSHError(f"cannot start a command over SSH to {self.spec.describe()} "
                           f"({exc or type(exc).__name__})", host=self.spec.host) from None
        return chan

    def run(self, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s$ %s", self.spec.host, command)
        chan = self._channel(command, timeout=timeout)
        try:
            out, err, status = _read_all(chan, time.monotonic() + timeout)
        except _ssh_errors() as exc:
            raise SSHError(f"SSH connection lost while running `{argv[0]}` "
                           f"({exc or type(exc).__name__})", host=self.spec.host) from None
        finally:
            chan.close()
        if status is None:
            if chan.closed and not self._client.get_transport():
                raise SSHError(f"SSH connection lost while running `{argv[0]}`",
                               host=self.spec.host)
            raise NodeTimeout(f"`{argv[0]}` did not finish within {timeout:.0f} s",
                                host=self.spec.host)
        return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s$ %s &", self.spec.host, command)
        return _SSHProcess(self._channel(command, timeout=30, combine=True))

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        try:
            with self._client.open_sftp() as sftp:
                with sftp.open(path, "wb") as fh:
                    fh.write(data)
                sftp.chmod(path, mode)
        except _ssh_errors() as exc:
            raise SSHError(f"cannot upload {path} ({exc or type(exc).__name__}); is the SFTP "
                           "subsystem enabled?", host=self.spec.host) from None

    def close(self) -> None:
        for client in (self._client, *reversed(self._hops)):
            client.close()


def _read_all(chan: paramiko.Channel, deadline: float) -> tuple[bytes, bytes, int | None]:
    """Everything a command writes until the node closes its output, then its exit status.

    An exit status can arrive before the last output does, so reading stops at
    EOF, not at the status. ``None`` as the status: the deadline passed (or the
    channel closed without one).
    """
    out, err = bytearray(), bytearray()
    while True:
        busy = False
        if chan.recv_ready():
            out += chan.recv(65536)
            busy = True
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
            busy = True
        if busy:
            continue
        if (chan.eof_received or chan.closed) and (chan.exit_status_ready() or chan.closed):
            break
        if time.monotonic() > deadline:
            return bytes(out), bytes(err), None
        select.select([chan], [], [], 0.05)
    if not chan.exit_status_ready():
        return bytes(out), bytes(err), None
    return bytes(out), bytes(err), chan.recv_exit_status()


def _known_hosts_hint(spec: ConnectSpec) -> str:
    files = " ".join(str(p) for p in spec.known_hosts)
    port = f"-p {spec.port} " if spec.port != 22 else ""
    return (f"`ssh-keyscan {port}{spec.address} >> {spec.known_hosts[0]}` after checking the "
            f"fingerprint, or rerun with --accept-new-host-keys (known_hosts: {files})")


def _who(spec: ConnectSpec) -> str:
    """``10.0.0.1``, ``jump host 10.0.0.1`` or ``jump host bastion (10.0.0.1)``."""
    if not spec.role:
        return spec.address
    return spec.role if spec.role.endswith(spec.address) else f"{spec.role} ({spec.address})"


def _client_for(spec: ConnectSpec) -> paramiko.SSHClient:
    """A client that checks ``spec``'s host key against its known_hosts files."""
    import paramiko

    client = paramiko.SSHClient()
    for known in spec.known_hosts:
        path = known.expanduser()
        if path.is_file():
            try:
                client.load_host_keys(str(path))
            except (OSError, paramiko.SSHException) as exc:
                log.warning("%s: cannot read known_hosts %s: %s", spec.host, path, exc)
    if spec.strict in ("no", "off", "false"):
        log.warning("%s: StrictHostKeyChecking=%s: an unknown host key is trusted without "
                    "being recorded (a changed one still fails)", spec.host, spec.strict)
        client.set_missing_host_key_policy(_accept_new(None))
    elif spec.strict == "accept-new":
        client.set_missing_host_key_policy(_accept_new(spec.known_hosts[0].expanduser()))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def _open(spec: ConnectSpec, *, timeout: float,
          sock: paramiko.Channel | paramiko.ProxyCommand | None) -> paramiko.SSHClient:
    """Connect and authenticate one hop, mapping every failure to :class:`SSHError`."""
    import paramiko

    client = _client_for(spec)
    where = spec.describe()
    try:
        client.connect(
            spec.address, port=spec.port, username=spec.user,
            # paramiko documents key_filename as "filename, or list of filenames".
            key_filename=[str(k) for k in spec.key_files] or None,  # type: ignore[arg-type]
            look_for_keys=not spec.key_files, allow_agent=spec.allow_agent,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
            compress=spec.compress, sock=sock,
        )
        if spec.keepalive:
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(spec.keepalive)
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise SSHError(
            f"host key of {_who(spec)} does not match "
            f"known_hosts ({exc.key.get_name()} {exc.key.fingerprint}); if the node was "
            f"reinstalled, remove the old key with "
            f"`ssh-keygen -R {spec.address} -f {spec.known_hosts[0]}`", host=spec.host) from None
    except paramiko.AuthenticationException:
        client.close()
        raise SSHError(
            f"SSH authentication failed for {where}; check ansible_user and "
            "ansible_ssh_private_key_file, and that the key is in the node's authorized_keys",
            host=spec.host) from None
    except paramiko.SSHException as exc:
        client.close()
        if _NO_BANNER.search(str(exc)):
            # TCP connected but sshd never spoke: paramiko stops waiting for the
            # handshake at the timeout and then finds no session to authenticate.
            raise SSHError(f"cannot reach {where}: the TCP connection opened but sshd did not "
                           f"answer within {timeout:.0f} s (node frozen or overloaded, or sshd "
                           "hung)", host=spec.host) from None
        if "known_hosts" in str(exc):
            raise SSHError(f"host key of {_who(spec)} is unknown; add it with "
                           + _known_hosts_hint(spec),
                           host=spec.host) from None
        raise SSHError(f"SSH to {where} failed: {exc or type(exc).__name__}",
                       host=spec.host) from None
    except TimeoutError:
        client.close()
        raise SSHError(f"cannot reach {where}: no answer within {timeout:.0f} s; check "
                       "ansible_host/ansible_port and the network path", host=spec.host) from None
    except (OSError, EOFError) as exc:
        client.close()
        reason = getattr(exc, "strerror", None) or exc or type(exc).__name__
        raise SSHError(f"cannot reach {where}: {reason}; check ansible_host/"
                       "ansible_port and that sshd runs on the node", host=spec.host) from None
    return client


def _tunnel(via: paramiko.SSHClient, hop: ConnectSpec, spec: ConnectSpec, *,
            timeout: float) -> paramiko.Channel:
    """A ``direct-tcpip`` channel through ``via`` to ``spec``'s address and port."""
    import paramiko

    transport = via.get_transport()
    try:
        if transport is None:
            raise paramiko.SSHException("connection closed")
        return transport.open_channel("direct-tcpip", (spec.address, spec.port), ("", 0),
                                      timeout=timeout)
    except _ssh_errors() as exc:
        raise SSHError(f"{hop.describe()} could not open a connection to {spec.address}:"
                       f"{spec.port} ({exc or type(exc).__name__}); check that the jump host "
                       "reaches the node and allows TCP forwarding", host=spec.host) from None


def connect_ssh(spec: ConnectSpec, *, timeout: float = 30.0) -> SSHSession:
    """Open an SSH session, through ``spec``'s jump hosts or ProxyCommand if it has them.

    The host key of every hop (each jump host, then the node) is checked
    against that hop's known_hosts files.

    Raises:
        SSHError: unreachable, host key unknown or changed, or authentication failed,
            at any hop (the message says which).
    """
    import paramiko

    timeout = min(timeout, spec.connect_timeout) if spec.connect_timeout else timeout
    hops: list[paramiko.SSHClient] = []
    sock: paramiko.Channel | paramiko.ProxyCommand | None = None
    try:
        if spec.proxy_command:
            try:
                sock = paramiko.ProxyCommand(shlex.join(["/bin/sh", "-c",
                                                         f"exec {spec.proxy_command}"]))
            except _ssh_errors() as exc:
                raise SSHError(f"ProxyCommand {spec.proxy_command!r} failed to start: {exc}",
                               host=spec.host) from None
        chain = (*spec.jumps, spec)
        for hop, nxt in itertools.pairwise(chain):
            client = _open(hop, timeout=timeout, sock=sock)
            hops.append(client)
            sock = _tunnel(client, hop, nxt, timeout=timeout)
        client = _open(spec, timeout=timeout, sock=sock)
    except BaseException:
        for hop_client in reversed(hops):
            hop_client.close()
        if isinstance(sock, paramiko.ProxyCommand):
            sock.close()
        raise
    return SSHSession(spec, client, hops)


def connect(host: Host, *, accept_new_host_keys: bool = False,
            timeout: float = 30.0) -> Session:
    """A session to ``host``: local for ``ansible_connection: local``, else SSH.

    Raises:
        SSHError: the host cannot be reached or authenticated.
        InputError: its connection variables are invalid.
    """
    spec = spec_for(host, accept_new_host_keys=accept_new_host_keys)
    if spec.local:
        return LocalSession(spec)
    if host.connection not in SSH_CONNECTIONS:
        raise InputError(f"ansible_connection {host.connection!r} is not supported by validate "
                         "and check (use ssh, paramiko_ssh or local)", host=host.name)
    return connect_ssh(spec, timeout=timeout)
