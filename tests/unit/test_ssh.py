"""SSH connection variables, command quoting, error mapping (paramiko patched), local transport."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import worker_cmd
from nodetune.collective.launch import worker_files
from nodetune.collective.worker import probe
from nodetune.errors import InputError, NodeTimeout, SSHError
from nodetune.measure import protocol
from nodetune.remote import ssh, ssh_config
from nodetune.remote.executor import kill_group
from nodetune.remote.ssh_executor import over_session


def host(**vars_: Any) -> Host:
    return Host(name="node-a", groups=("gpu_nodes",), vars=vars_)


@pytest.fixture(autouse=True)
def no_ssh_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep this machine's ~/.ssh/config and /etc/ssh/ssh_config out of the tests."""
    monkeypatch.setattr(ssh_config, "USER_CONFIG", tmp_path / "no-user-config")
    monkeypatch.setattr(ssh_config, "SYSTEM_CONFIG", tmp_path / "no-system-config")


def test_ssh_options_forms() -> None:
    opts = ssh.ssh_options("-o StrictHostKeyChecking=yes -oPort=2222 "
                           "-o 'UserKnownHostsFile /a/kh /b/kh' -i ~/.ssh/k -l admin -C -q")
    assert opts == [("StrictHostKeyChecking", "yes"), ("Port", "2222"),
                    ("UserKnownHostsFile", "/a/kh /b/kh"), ("IdentityFile", "~/.ssh/k"),
                    ("User", "admin"), ("Compression", "yes")]


def test_spec_from_inventory_vars(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    spec = ssh.spec_for(host(
        ansible_host="10.0.0.5", ansible_port="2200", ansible_user="ubuntu",
        ansible_ssh_private_key_file=str(key), ansible_ssh_common_args=(
            "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/lab/known_hosts")))
    assert (spec.address, spec.port, spec.user) == ("10.0.0.5", 2200, "ubuntu")
    assert spec.key_files == (key,)
    assert spec.known_hosts == (Path("/lab/known_hosts"), Path("/etc/ssh/ssh_known_hosts"))
    assert spec.strict == "yes" and not spec.local and not spec.jumps
    assert spec.describe() == f"ubuntu@10.0.0.5:2200 with key {key}"


def test_spec_defaults_and_accept_new() -> None:
    spec = ssh.spec_for(host(), accept_new_host_keys=True)
    assert spec.address == "node-a" and spec.port == 22 and spec.user is None
    assert spec.known_hosts == tuple(p.expanduser() for p in ssh.DEFAULT_KNOWN_HOSTS)
    assert spec.strict == "accept-new"


def test_spec_local_and_bad_port() -> None:
    assert ssh.spec_for(host(ansible_connection="local")).local
    with pytest.raises(InputError, match="ansible_port"):
        ssh.spec_for(host(ansible_port="ssh"))
    with pytest.raises(InputError, match="1-65535"):
        ssh.spec_for(host(ansible_port=70000))


def test_unsupported_connection_plugin() -> None:
    with pytest.raises(InputError, match="winrm"):
        ssh.connect(host(ansible_connection="winrm"))


@pytest.mark.parametrize("name", ["ansible.builtin.local", "ansible.legacy.local"])
def test_fqcn_local_connection_is_a_local_session(name: str) -> None:
    session = ssh.connect(host(ansible_connection=name))
    assert isinstance(session, ssh.LocalSession)
    assert session.run(["true"], timeout=10).exit_status == 0


@pytest.mark.parametrize("name", ["ansible.builtin.ssh", "ansible.legacy.ssh",
                                  "ansible.builtin.paramiko_ssh", "paramiko"])
def test_fqcn_ssh_connection_is_reached_over_ssh(name: str, tmp_path: Path) -> None:
    # Port 1 on loopback refuses: an SSH attempt (exit 3), not a refused input (exit 2).
    known = tmp_path / "known_hosts"
    known.write_text("")
    with pytest.raises(SSHError, match="cannot reach"):
        ssh.connect(host(ansible_connection=name, ansible_host="127.0.0.1", ansible_port=1,
                         ansible_ssh_common_args=f"-o UserKnownHostsFile={known}"), timeout=5)


def test_shell_command_quotes_everything() -> None:
    line = ssh.shell_command(["echo", "a b", "$(id)", "x;y"], env={"K": "v w"}, cwd="/t d")
    assert line == "cd '/t d' && exec env 'K=v w' echo 'a b' '$(id)' 'x;y'"
    with pytest.raises(InputError):
        ssh.shell_command(["true"], env={"BAD-NAME": "1"})
    with pytest.raises(InputError):
        ssh.shell_command([])


def test_local_session_runs_hostile_values_literally(tmp_path: Path) -> None:
    session = ssh.connect(host(ansible_connection="local"))
    nasty = "'; touch pwned; echo \"$(id)\" `id` $HOME \\"
    res = session.run(["printf", "%s|%s", nasty], timeout=10, env={"V": nasty},
                      cwd=str(tmp_path))
    assert res.exit_status == 0 and res.stdout == nasty + "|"
    res = session.run(["sh", "-c", 'printf %s "$V"'], timeout=10, env={"V": nasty})
    assert res.stdout == nasty
    assert not (tmp_path / "pwned").exists()
    assert session.run(["false"], timeout=10).exit_status == 1


def test_local_session_timeout() -> None:
    session = ssh.connect(host(ansible_connection="local"))
    with pytest.raises(NodeTimeout, match="within 1 s"):
        session.run(["sleep", "5"], timeout=1)


def test_local_upload(tmp_path: Path) -> None:
    session = ssh.connect(host(ansible_connection="local"))
    target = tmp_path / "w.py"
    session.upload(b"print(1)\n", str(target), mode=0o600)
    assert target.read_bytes() == b"print(1)\n"
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    """The worker as uploaded to a node: one file, its protocol module beside it."""
    for name, data in worker_files().items():
        (tmp_path / name).write_bytes(data)
    return tmp_path / worker_cmd.WORKER_NAME


def _launched(session: ssh.Session, worker: Path,
              argv: list[str]) -> tuple[ssh.Process, int]:
    proc = session.start([sys.executable, str(worker), "launch", "--", *argv])
    for line in proc.lines():
        event = protocol.decode(line)
        if event is not None and event["event"] == "launched":
            return proc, int(event["pgid"])
    raise AssertionError("no launched event")


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_group_ends_the_whole_group(worker: Path) -> None:
    session = ssh.connect(host(ansible_connection="local"))
    proc, pgid = _launched(session, worker, ["sh", "-c", "sleep 60 & sleep 60 & wait"])
    assert _alive(pgid)
    assert kill_group(over_session("localhost", session), pgid, grace=5)
    assert not _alive(pgid)
    proc.close()


def test_launch_guard_kills_group_when_controller_goes_away(worker: Path) -> None:
    session = ssh.connect(host(ansible_connection="local"))
    proc, pgid = _launched(session, worker, ["sh", "-c", "trap '' TERM; sleep 60 & wait"])
    proc.close()  # EOF on the guard's stdin, as when the SSH channel drops
    deadline = time.monotonic() + 10
    while _alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pgid)


def test_interface_for_loopback() -> None:
    assert probe.interface_for("127.0.0.1") == ("lo", "127.0.0.1")


# --- paramiko errors mapped at the boundary ---------------------------------------


SPEC = ssh.ConnectSpec(host="node-a", address="10.0.0.5", user="ubuntu",
                       key_files=(Path("/keys/id"),), known_hosts=(Path("/lab/kh"),))


def _raise(exc: BaseException) -> Any:
    def connect(self: paramiko.SSHClient, *args: Any, **kwargs: Any) -> None:
        raise exc
    return connect


@pytest.mark.parametrize(("exc", "words"), [
    (paramiko.AuthenticationException("denied"),
     ["node-a:", "authentication failed for ubuntu@10.0.0.5:22 with key /keys/id"]),
    (paramiko.SSHException("Server '10.0.0.5' not found in known_hosts"),
     ["host key of 10.0.0.5 is unknown", "ssh-keyscan 10.0.0.5 >> /lab/kh",
      "--accept-new-host-keys"]),
    (ConnectionRefusedError(111, "Connection refused"),
     ["cannot reach ubuntu@10.0.0.5:22", "Connection refused", "sshd"]),
    (TimeoutError("timed out"), ["no answer within 30 s"]),
    (paramiko.BadHostKeyException("10.0.0.5", paramiko.RSAKey.generate(1024),
                                  paramiko.RSAKey.generate(1024)),
     ["does not match known_hosts", "ssh-keygen -R 10.0.0.5 -f /lab/kh"]),
])
def test_paramiko_errors_become_ssherror(monkeypatch: pytest.MonkeyPatch, exc: BaseException,
                                         words: list[str]) -> None:
    monkeypatch.setattr(paramiko.SSHClient, "connect", _raise(exc))
    with pytest.raises(SSHError) as info:
        ssh.connect_ssh(SPEC, timeout=30)
    assert info.value.host == "node-a"
    for word in words:
        assert word in str(info.value)
    assert info.value.exit_code == 3


def test_strict_policy_is_reject_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def connect(self: paramiko.SSHClient, *args: Any, **kwargs: Any) -> None:
        seen["policy"] = self._policy
        seen["kwargs"] = kwargs

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    ssh.connect_ssh(SPEC).close()
    assert isinstance(seen["policy"], paramiko.RejectPolicy)
    assert seen["kwargs"]["key_filename"] == ["/keys/id"]
    assert seen["kwargs"]["look_for_keys"] is False
    ssh.connect_ssh(ssh.ConnectSpec(host="n", address="a", strict="accept-new")).close()
    assert not isinstance(seen["policy"], paramiko.RejectPolicy)


def test_accept_new_records_key(tmp_path: Path) -> None:
    known = tmp_path / "kh"
    policy = ssh._accept_new(known)
    client = paramiko.SSHClient()
    key = paramiko.RSAKey.generate(1024)
    policy.missing_host_key(client, "10.0.0.9", key)
    assert known.read_text().startswith("10.0.0.9 ssh-rsa ")
    assert client.get_host_keys().lookup("10.0.0.9") is not None


# --- commands over an established connection: every failure is an SSHError -----------


class _FakeChannel:
    """A paramiko Channel's reading interface, scripted: (stdout, stderr) chunks per poll."""

    def __init__(self, script: list[tuple[bytes, bytes]], *, status_first: bool,
                 fail: BaseException | None = None) -> None:
        self.script = script
        self.out = b""
        self.err = b""
        self.status_first = status_first
        self.fail = fail
        self.eof_received = False
        self.closed = False
        self._fd = os.open(os.devnull, os.O_RDONLY)  # select() on it returns at once

    def fileno(self) -> int:
        return self._fd

    def _tick(self) -> None:
        if self.fail is not None and not self.script:
            raise self.fail
        if self.script:
            out, err = self.script.pop(0)
            self.out += out
            self.err += err
        else:
            self.eof_received = True

    def set_combine_stderr(self, combine: bool) -> None:
        pass

    def exec_command(self, command: str) -> None:
        pass

    def recv_ready(self) -> bool:
        self._tick()
        return bool(self.out)

    def recv(self, n: int) -> bytes:
        data, self.out = self.out[:n], self.out[n:]
        return data

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, n: int) -> bytes:
        data, self.err = self.err[:n], self.err[n:]
        return data

    def exit_status_ready(self) -> bool:
        return self.status_first or self.eof_received

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True
        os.close(self._fd)


class _FakeTransport:
    def __init__(self, chan: Any = None, error: BaseException | None = None) -> None:
        self.chan, self.error = chan, error

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.chan


class _FakeClient:
    def __init__(self, transport: _FakeTransport) -> None:
        self.transport = transport

    def get_transport(self) -> _FakeTransport:
        return self.transport

    def close(self) -> None:
        pass


def _session(transport: _FakeTransport) -> ssh.SSHSession:
    return ssh.SSHSession(SPEC, _FakeClient(transport))  # type: ignore[arg-type]


def test_output_after_the_exit_status_is_read() -> None:
    # sshd may send exit-status before the last output: reading stops at EOF, not at it.
    chan = _FakeChannel([(b"", b""), (b"", b""), (b"/tmp/nodetune-validate.x\n", b"warn\n")],
                        status_first=True)
    res = _session(_FakeTransport(chan)).run(["mktemp", "-d"], timeout=10)
    assert res.stdout == "/tmp/nodetune-validate.x\n" and res.stderr == "warn\n"
    assert chan.closed


@pytest.mark.parametrize("error", [paramiko.ChannelException(2, "Connect failed"),
                                   paramiko.SSHException("Timeout opening channel."),
                                   EOFError(), ConnectionResetError(104, "reset")])
def test_open_session_errors_become_ssherror(error: BaseException) -> None:
    session = _session(_FakeTransport(error=error))
    for call in (lambda: session.start(["true"]), lambda: session.run(["true"], timeout=5)):
        with pytest.raises(SSHError) as info:
            call()
        assert info.value.host == "node-a" and info.value.exit_code == 3


def test_connection_lost_mid_command_is_ssherror() -> None:
    chan = _FakeChannel([(b"partial", b"")], status_first=False,
                        fail=paramiko.SSHException("Socket is closed"))
    with pytest.raises(SSHError, match="connection lost while running `cat`") as info:
        _session(_FakeTransport(chan)).run(["cat"], timeout=5)
    assert info.value.host == "node-a"


def test_a_node_that_never_answers_is_one_line_without_paramiko_noise(
        capsys: pytest.CaptureFixture[str]) -> None:
    """sshd frozen (TCP accepted, no banner): one SSHError naming the node, no tracebacks.

    A real listening socket that accepts and never speaks stands in for a frozen node.
    """
    import socket
    import threading

    from nodetune.cli.console import setup_logging

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    setup_logging(0)
    try:
        with pytest.raises(SSHError) as info:
            ssh.connect(host(ansible_host="127.0.0.1", ansible_port=port), timeout=1)
        # paramiko's transport thread logs its failure after connect has given up.
        for thread in threading.enumerate():
            if isinstance(thread, paramiko.Transport):
                thread.join(timeout=10)
    finally:
        done.set()
        server.close()
        for conn in accepted:
            conn.close()
        logging.getLogger("paramiko").setLevel(logging.NOTSET)
    assert info.value.host == "node-a"
    assert "sshd did not answer within 1 s" in info.value.message
    assert "No existing session" not in info.value.message
    err = capsys.readouterr().err
    assert "Exception (client)" not in err and "Traceback" not in err
    assert "protocol banner" not in err, err
