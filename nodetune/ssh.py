"""SSH sessions to inventory hosts (paramiko), with a local stand-in of the same shape.

Every command sent to a node is built from an argument list and ``shlex.quote``d
(:func:`shell_command`); both transports run that same shell string, so a host
with ``ansible_connection: local`` goes through the code path an SSH host does.
"""

from __future__ import annotations

import logging
import os
import re
import select
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import paramiko

from nodetune.errors import InputError, SSHError, TimeoutError_
from nodetune.inventory import Host

log = logging.getLogger(__name__)

DEFAULT_KNOWN_HOSTS = (Path("~/.ssh/known_hosts"), Path("/etc/ssh/ssh_known_hosts"))
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOCAL_CONNECTIONS = frozenset({"local"})


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a finished command left behind."""

    exit_status: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class ConnectSpec:
    """How to reach one host, resolved from its Ansible connection variables."""

    host: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: Path | None = None
    known_hosts: tuple[Path, ...] = DEFAULT_KNOWN_HOSTS
    strict: str = "yes"
    local: bool = False

    def describe(self) -> str:
        """``user@address:port with key K`` for messages."""
        who = f"{self.user}@" if self.user else ""
        key = f" with key {self.key_file}" if self.key_file else " with the SSH agent/default keys"
        return f"{who}{self.address}:{self.port}{key}"


def ssh_options(args: str) -> dict[str, str]:
    """The ``-o Key=Value`` options (and ``-i``/``-p``/``-l``) in an ssh argument string."""
    opts: dict[str, str] = {}
    words = shlex.split(args)
    flags = {"-i": "identityfile", "-p": "port", "-l": "user"}
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word == "-o" and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        elif word in flags and i + 1 < len(words):
            opts[flags[word]] = words[i + 1]
            i += 1
        if value is not None:
            key, _, val = value.replace("=", " ", 1).partition(" ")
            opts[key.strip().lower()] = val.strip()
        i += 1
    return opts


def spec_for(host: Host, *, accept_new_host_keys: bool = False) -> ConnectSpec:
    """Resolve ``host``'s connection variables the way ``ansible -m ping`` would use them.

    Reads ``ansible_host``, ``ansible_port``, ``ansible_user``,
    ``ansible_ssh_private_key_file`` and, from ``ansible_ssh_common_args`` /
    ``ansible_ssh_extra_args``, ``UserKnownHostsFile`` and ``StrictHostKeyChecking``.

    Raises:
        InputError: a port that is not a number.
    """
    v = host.vars
    if host.connection in LOCAL_CONNECTIONS:
        return ConnectSpec(host=host.name, address=host.address, local=True)
    opts = ssh_options(" ".join(str(v.get(k, "")) for k in
                                ("ansible_ssh_common_args", "ansible_ssh_extra_args")))
    port_raw = v.get("ansible_port", v.get("ansible_ssh_port", opts.get("port", 22)))
    try:
        port = int(port_raw)
    except (TypeError, ValueError):
        raise InputError(f"ansible_port {port_raw!r} is not a number", host=host.name) from None
    key = v.get("ansible_ssh_private_key_file") or opts.get("identityfile")
    user = v.get("ansible_user", v.get("ansible_ssh_user", opts.get("user")))
    known = tuple(Path(p) for p in opts.get("userknownhostsfile", "").split()) or (
        DEFAULT_KNOWN_HOSTS)
    strict = opts.get("stricthostkeychecking", "yes").lower()
    if accept_new_host_keys:
        strict = "accept-new"
    return ConnectSpec(
        host=host.name, address=host.address, port=port,
        user=str(user) if user else None,
        key_file=Path(str(key)).expanduser() if key else None,
        known_hosts=tuple(p.expanduser() for p in known), strict=strict,
    )


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
        bad = [k for k in env if not _ENV_NAME.match(k)]
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
            TimeoutError_: not finished within ``timeout`` seconds.
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


def kill_group(session: Session, pgid: int, *, grace: float = 3.0) -> bool:
    """SIGTERM process group ``pgid`` on the host, SIGKILL what is left after ``grace``.

    Returns:
        True when the group is gone.
    """
    group = f"-{int(pgid)}"
    session.run(["kill", "-s", "TERM", "--", group], timeout=15)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if session.run(["kill", "-s", "0", "--", group], timeout=15).exit_status != 0:
            return True
        time.sleep(0.2)
    log.warning("%s: process group %d survived SIGTERM; sending SIGKILL", session.spec.host, pgid)
    session.run(["kill", "-s", "KILL", "--", group], timeout=15)
    time.sleep(0.2)
    return session.run(["kill", "-s", "0", "--", group], timeout=15).exit_status != 0


# --- SSH ----------------------------------------------------------------------------


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust a host seen for the first time and record its key (``accept-new``)."""

    def __init__(self, record_in: Path | None) -> None:
        self.record_in = record_in

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("%s: trusting new host key %s %s", hostname, key.get_name(),
                    key.fingerprint)
        if self.record_in is not None:
            self.record_in.parent.mkdir(parents=True, exist_ok=True)
            with self.record_in.open("a") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _SSHProcess:
    def __init__(self, channel: paramiko.Channel) -> None:
        self._chan = channel
        self._out = channel.makefile("rb")

    def lines(self) -> Iterator[str]:
        for raw in self._out:
            yield raw.decode(errors="replace").rstrip("\r\n")

    def poll(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def close(self) -> None:
        self._chan.close()


class SSHSession:
    """A paramiko connection to one host."""

    def __init__(self, spec: ConnectSpec, client: paramiko.SSHClient) -> None:
        self.spec = spec
        self._client = client
        self._lock = threading.Lock()

    def _transport(self) -> paramiko.Transport:
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise SSHError(f"SSH connection to {self.spec.describe()} dropped",
                           host=self.spec.host)
        return transport

    def _channel(self, command: str, *, timeout: float) -> paramiko.Channel:
        try:
            chan = self._transport().open_session(timeout=timeout)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError) as exc:
            raise SSHError(f"cannot start a command over SSH ({exc})", host=self.spec.host) from exc
        return chan

    def run(self, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s$ %s", self.spec.host, command)
        chan = self._channel(command, timeout=timeout)
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        try:
            while True:
                if chan.recv_ready():
                    out += chan.recv(65536)
                elif chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                elif chan.exit_status_ready():
                    break
                elif time.monotonic() > deadline:
                    raise TimeoutError_(f"`{argv[0]}` did not finish within {timeout:.0f} s",
                                        host=self.spec.host)
                else:
                    select.select([chan], [], [], 0.05)
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            status = chan.recv_exit_status()
        finally:
            chan.close()
        return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        command = shell_command(argv, env=env, cwd=cwd)
        log.debug("%s$ %s &", self.spec.host, command)
        chan = self._transport().open_session(timeout=30)
        chan.set_combine_stderr(True)
        try:
            chan.exec_command(command)
        except (paramiko.SSHException, OSError) as exc:
            raise SSHError(f"cannot start a command over SSH ({exc})", host=self.spec.host) from exc
        return _SSHProcess(chan)

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        try:
            with self._client.open_sftp() as sftp:
                with sftp.open(path, "wb") as fh:
                    fh.write(data)
                sftp.chmod(path, mode)
        except (paramiko.SSHException, OSError) as exc:
            raise SSHError(f"cannot upload {path} ({exc}); is the SFTP subsystem enabled?",
                           host=self.spec.host) from exc

    def close(self) -> None:
        self._client.close()


def _known_hosts_hint(spec: ConnectSpec) -> str:
    files = " ".join(str(p) for p in spec.known_hosts)
    port = f"-p {spec.port} " if spec.port != 22 else ""
    return (f"`ssh-keyscan {port}{spec.address} >> {spec.known_hosts[0]}` after checking the "
            f"fingerprint, or rerun with --accept-new-host-keys (known_hosts: {files})")


def connect_ssh(spec: ConnectSpec, *, timeout: float = 30.0) -> SSHSession:
    """Open an SSH session with host keys checked against ``spec.known_hosts``.

    Raises:
        SSHError: unreachable, host key unknown or changed, or authentication failed.
    """
    client = paramiko.SSHClient()
    for known in spec.known_hosts:
        path = known.expanduser()
        if path.is_file():
            try:
                client.load_host_keys(str(path))
            except (OSError, paramiko.SSHException) as exc:
                log.warning("%s: cannot read known_hosts %s: %s", spec.host, path, exc)
    if spec.strict in ("no", "off"):
        log.warning("%s: StrictHostKeyChecking=%s: host key not checked", spec.host, spec.strict)
        client.set_missing_host_key_policy(_AcceptNew(None))
    elif spec.strict == "accept-new":
        client.set_missing_host_key_policy(_AcceptNew(spec.known_hosts[0].expanduser()))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    where = spec.describe()
    try:
        client.connect(
            spec.address, port=spec.port, username=spec.user,
            key_filename=str(spec.key_file) if spec.key_file else None,
            look_for_keys=spec.key_file is None, allow_agent=True,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise SSHError(
            f"host key of {spec.address} does not match known_hosts ({exc.key.get_name()} "
            f"{exc.key.fingerprint}); if the node was reinstalled, remove the old key with "
            f"`ssh-keygen -R {spec.address} -f {spec.known_hosts[0]}`", host=spec.host) from None
    except paramiko.AuthenticationException:
        client.close()
        raise SSHError(
            f"SSH authentication failed for {where}; check ansible_user and "
            "ansible_ssh_private_key_file, and that the key is in the node's authorized_keys",
            host=spec.host) from None
    except paramiko.SSHException as exc:
        client.close()
        if "known_hosts" in str(exc):
            raise SSHError(f"host key of {spec.address} is unknown; add it with "
                           + _known_hosts_hint(spec), host=spec.host) from None
        raise SSHError(f"SSH to {where} failed: {exc}", host=spec.host) from None
    except TimeoutError:
        client.close()
        raise SSHError(f"cannot reach {where}: no answer within {timeout:.0f} s; check "
                       "ansible_host/ansible_port and the network path", host=spec.host) from None
    except OSError as exc:
        client.close()
        raise SSHError(f"cannot reach {where}: {exc.strerror or exc}; check ansible_host/"
                       "ansible_port and that sshd runs on the node", host=spec.host) from None
    return SSHSession(spec, client)


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
            raise TimeoutError_(f"`{argv[0]}` did not finish within {timeout:.0f} s",
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
    if host.connection not in ("ssh", "paramiko", "smart"):
        raise InputError(f"ansible_connection {host.connection!r} is not supported by validate "
                         "(use ssh or local)", host=host.name)
    return connect_ssh(spec, timeout=timeout)
