"""Values read back from nodes are checked before use; cleanup says what it could not do.

Sessions are stand-ins at the SSH boundary that record every command; the real
paths run in tests/integration/test_validate_faults.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import answers, cleanup, launch
from nodetune.collective.datapath import Interfaces, Request
from nodetune.collective.nodes import RunNode, ValidateEvent
from nodetune.collective.plan import NodePlan
from nodetune.errors import LaunchError, NodeTimeout, SSHError
from nodetune.measure import protocol
from nodetune.remote import ssh
from nodetune.remote.ssh import CommandResult, ConnectSpec
from nodetune.remote.ssh_executor import over_session

TMP = "/tmp/nodetune-validate.AbC123xY"  # a path on a pretend node


class FakeSession:
    """Answers commands from a script; ``wedged`` sessions time out on everything."""

    def __init__(self, name: str, *, wedged: bool = False,
                 mktemp: str = f"/tmp\n{TMP}\n") -> None:
        self.spec = ConnectSpec(host=name, address=name)
        self.wedged = wedged
        self.mktemp = mktemp
        self.ran: list[list[str]] = []
        self.uploads: list[str] = []
        self.closed = False

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        if self.wedged:
            raise NodeTimeout(f"`{argv[0]}` did not finish within {timeout:.0f} s",
                              host=self.spec.host)
        self.ran.append(list(argv))
        if argv[0] == "sh":
            return CommandResult(0, self.mktemp, "")
        if argv[:2] == ["kill", "-s"] and argv[2] == "0":
            return CommandResult(1, "", "no such process")
        return CommandResult(0, "", "")

    def start(self, argv: Sequence[str], **_: Any) -> Any:
        raise AssertionError("nothing may start")

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        self.uploads.append(path)

    def close(self) -> None:
        self.closed = True


def node(name: str, rank: int, session: FakeSession | None, **kw: Any) -> RunNode:
    host = Host(name=name, groups=(), vars={})
    return RunNode(NodePlan(host=host, rank=rank, python="python3", env={}, data=Request("test")),
                 runner=None if session is None else over_session(name, session), **kw)


@pytest.mark.parametrize("answer", [
    "", "\n", "/tmp\n", "/tmp\n\n", "/tmp\n/\n", "/tmp\n/tmp\n",
    "/\n/nodetune-validate.AbC123xY\n",                      # the temp root is /
    "/tmp\n/var/nodetune-validate.AbC123xY\n",               # not under the root
    "/tmp\n/tmp/../nodetune-validate.AbC123xY\n",
    "/tmp\n/tmp/x/nodetune-validate.AbC123xY\n",
    "/tmp\n/tmp/nodetune-validate.AbC\n",                    # not mktemp's eight characters
    "/tmp\n/tmp/nodetune-validate.AbC123xY; rm -rf ~\n",
    "/tmp\n/tmp/nodetune-validate.AbC123xY\n/tmp/other\n",
    "/tmp\ntmp/nodetune-validate.AbC123xY\n",
])
def test_an_unexpected_temp_path_is_refused_before_anything_is_written(answer: str) -> None:
    session = FakeSession("node-a", mktemp=answer)
    n = node("node-a", 0, session)
    with pytest.raises(LaunchError, match="mktemp answered") as err:
        launch._preflight(n, {"nodetune_worker.py": b"x"}, "10.0.0.1", 10.0, lambda _e: None,
                          "run-1")
    assert err.value.host == "node-a"
    assert session.uploads == [] and n.tmpdir is None


def test_the_expected_temp_path_is_used() -> None:
    assert answers.checked_tmpdir(f"/tmp\n{TMP}\n", host="n") == TMP
    assert answers.checked_tmpdir("/scratch/u1\n/scratch/u1/nodetune-validate.q9Z0aa11\n",
                                 host="n") == "/scratch/u1/nodetune-validate.q9Z0aa11"


@pytest.mark.parametrize("value", [None, "29500", 29500.0, True, 0, 80, 65536, -1])
def test_a_reported_port_must_be_an_unprivileged_int(value: object) -> None:
    with pytest.raises(LaunchError, match="not an integer in 1024-65535"):
        answers.checked_port(value, host="n")
    assert answers.checked_port(29500, host="n") == 29500


@pytest.mark.parametrize("value", [-1, 0, 1, True, "77"])
def test_a_reported_process_group_that_must_not_be_signalled(value: object) -> None:
    # kill -- -1 signals every process the user may; -0 the caller's own group.
    with pytest.raises(LaunchError, match="refusing to signal it"):
        answers.checked_pgid(value, host="n")
    assert answers.checked_pgid(4242, host="n") == 4242


def _cleanup(ns: list[RunNode]) -> list[ValidateEvent]:
    seen: list[ValidateEvent] = []
    cleanup.cleanup(ns, seen.append, "run1")
    return seen


def test_cleanup_that_cannot_reach_a_node_says_so_and_names_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(host: Host, **_: Any) -> ssh.Session:
        raise SSHError("cannot reach node-b: no answer within 10 s", host=host.name)

    monkeypatch.setattr(ssh, "connect", unreachable)
    good, frozen = FakeSession("node-a"), FakeSession("node-b", wedged=True)
    ns = [node("node-a", 0, good, tmpdir=TMP, pgid=4242),
          node("node-b", 1, frozen, tmpdir=TMP, pgid=4343)]
    seen = _cleanup(ns)
    assert ["rm", "-rf", "--", TMP] in good.ran
    bad = [e for e in seen if e.host == "node-b"]
    assert len(bad) == 1 and f"temp dir {TMP} left on the node" in bad[0].message
    assert "does not answer" in bad[0].message and "cannot reach" in bad[0].message
    # Never the claim that everything was removed.
    assert not any(e.host is None and "removed temp dirs" in e.message for e in seen)
    assert [e.host for e in seen if "removed temp dirs" in e.message] == ["node-a"]
    assert good.closed and frozen.closed


def test_cleanup_uses_a_new_connection_when_the_old_one_is_wedged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = FakeSession("node-b")
    monkeypatch.setattr(ssh, "connect", lambda host, **_: fresh)
    ns = [node("node-a", 0, FakeSession("node-a"), tmpdir=TMP),
          node("node-b", 1, FakeSession("node-b", wedged=True), tmpdir=TMP, pgid=4343)]
    seen = _cleanup(ns)
    assert ["kill", "-s", "TERM", "--", "-4343"] in fresh.ran
    assert ["rm", "-rf", "--", TMP] in fresh.ran and fresh.closed
    assert [(e.host, e.message) for e in seen] == [
        (None, "stopped remote processes, removed temp dirs")]


@pytest.mark.parametrize("value", ["", "eth0 eth1", "a/b", "eth0:1", "x" * 16, "..", 7,
                                   "eth0\n", "$(reboot)"])
def test_a_reported_interface_must_be_an_interface_name(value: object) -> None:
    # It becomes GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME on the node.
    with pytest.raises(LaunchError, match="not an interface name; set nodetune_socket_ifname"):
        answers.checked_iface(value, host="n")
    assert answers.checked_iface("enp65s0f0np0", host="n") == "enp65s0f0np0"
    assert answers.checked_iface(None, host="n") is None


@pytest.mark.parametrize("value", ["eth0", ["eth0", "$(reboot)"], [7], {"eth0": 1}])
def test_a_reported_interface_list_must_hold_only_interface_names(value: object) -> None:
    # Any of them may become the data interface.
    with pytest.raises(LaunchError, match="n: the node reported interface"):
        answers.checked_ifaces(value, host="n")
    assert answers.checked_ifaces(["lo", "eth0", "eth1"], host="n") == ("lo", "eth0", "eth1")
    assert answers.checked_ifaces(None, host="n") == ()


def test_the_probe_answer_gives_one_set_of_interfaces_the_route_included() -> None:
    info = {"python": "3.12.3", "torch": "2.11.0", "cuda_devices": 2, "free_port": 29500,
            "iface": "eth1", "interfaces": ["lo", "eth0", "eth1"], "rdma_interfaces": [],
            "ssh_iface": "eth0", "gloo": True}
    probe = answers.probe_from(info, host="n")
    assert probe.interfaces == Interfaces(usable=("lo", "eth0", "eth1"), route="eth1",
                                          ssh="eth0")
    assert (probe.cuda_devices, probe.free_port, probe.raw["gloo"]) == (2, 29500, True)
    with pytest.raises(LaunchError, match="n: the worker's probe answer is malformed"):
        answers.probe_from({**info, "cuda_devices": "two"}, host="n")
    with pytest.raises(LaunchError, match="n: the node reported free port 80"):
        answers.probe_from({**info, "free_port": 80}, host="n")
    with pytest.raises(LaunchError, match="n: the node reported interface 'eth1 eth2'"):
        answers.probe_from({**info, "iface": "eth1 eth2"}, host="n")


class SilentWorker:
    """A started worker that says it launched and then never answers the probe."""

    def __init__(self, lines: list[str], status: int | None = None) -> None:
        self._lines, self._status = lines, status
        self._hold = threading.Event()

    def lines(self) -> Iterator[str]:
        yield from self._lines
        if self._status is None:
            self._hold.wait(5)  # alive and silent

    def poll(self) -> int | None:
        return self._status

    def send(self, data: bytes) -> None:
        raise AssertionError("no launch spec before a probe answer")

    def close(self) -> None:
        self._hold.set()


class StartingSession(FakeSession):
    def __init__(self, name: str, worker: SilentWorker) -> None:
        super().__init__(name)
        self.worker = worker
        self.started: list[list[str]] = []
        self.env: Mapping[str, str] | None = None

    def start(self, argv: Sequence[str], **kw: Any) -> Any:
        self.started.append(list(argv))
        self.env = kw.get("env")
        return self.worker


def test_a_probe_that_never_answers_is_a_timeout_naming_the_node_with_its_group_noted() -> None:
    worker = SilentWorker([protocol.encode("launched", pgid=4242, hostname="a").rstrip()])
    session = StartingSession("node-a", worker)
    n = node("node-a", 0, session)
    with pytest.raises(NodeTimeout, match=r"did not answer the probe within 0\.3 s") as err:
        launch._preflight(n, {"w": b"x"}, "10.0.0.1", 0.3, lambda _e: None, "run-1")
    assert err.value.host == "node-a"
    assert n.pgid == 4242 and n.tmpdir == TMP  # what the cleanup needs to find
    argv = session.started[0]
    assert argv[2:4] == ["launch", "--"] and "serve" in argv and "--free-port" in argv
    assert session.env is not None and session.env["NODETUNE_RUN_ID"] == "run-1"
    worker.close()


def test_a_worker_that_ends_before_answering_says_why() -> None:
    worker = SilentWorker(["sh: 1: exec: /opt/nope/python: not found"], status=127)
    n = node("node-b", 1, StartingSession("node-b", worker))
    with pytest.raises(LaunchError, match="not found or not executable") as err:
        launch._preflight(n, {"w": b"x"}, "10.0.0.1", 5.0, lambda _e: None, "run-1")
    assert err.value.host == "node-b" and "/opt/nope/python" in str(err.value)


class ContainerSession(FakeSession):
    """A node whose container runtime is missing (127) or keeps the run's container."""

    def __init__(self, name: str, *, runtime_missing: bool = False, keeps: str = "") -> None:
        super().__init__(name)
        self.runtime_missing, self.keeps = runtime_missing, keeps

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        if argv[0] in ("podman", "docker"):
            self.ran.append(list(argv))
            if self.runtime_missing:
                return CommandResult(127, "", f"sh: 1: {argv[0]}: not found")
            if argv[1] == "ps":
                return CommandResult(0, self.keeps, "")
            return CommandResult(125 if self.keeps else 0, "", "Error: cannot remove: busy")
        return super().run(argv, timeout=timeout, env=env, cwd=cwd)


def _container_node(session: FakeSession) -> RunNode:
    from nodetune.container.runtime import Container
    n = node("node-a", 0, session, tmpdir=TMP)
    n.container = Container(host="node-a", image="pytorch:24.10")
    return n


def test_a_node_without_the_runtime_still_loses_the_runs_temp_dir() -> None:
    """validate --image on a node without podman: the probe failed (exit 3); the cleanup's
    `podman rm` fails too, and the temp dir must go all the same."""
    session = ContainerSession("node-a", runtime_missing=True)
    assert cleanup.cleanup([_container_node(session)], lambda _e: None, "ab" * 16) == {}
    assert ["rm", "-rf", "--", TMP] in session.ran


def test_a_container_the_runtime_keeps_is_named_and_the_temp_dir_still_goes() -> None:
    session = ContainerSession("node-a", keeps=f"nodetune-{'ab' * 16}-rank0\n")
    left = cleanup.cleanup([_container_node(session)], lambda _e: None, "ab" * 16)
    assert ["rm", "-rf", "--", TMP] in session.ran  # processes and dir cleaned regardless
    assert f"nodetune-{'ab' * 16}-rank0" in left["node-a"]
    assert f"nodetune.run={'ab' * 16}" in left["node-a"] and "podman rm -f" in left["node-a"]


class ReapingSession(FakeSession):
    """A node whose worker answers the one-step cleanup (``reap --remove``) with ``said``."""

    def __init__(self, name: str, said: dict[str, Any]) -> None:
        super().__init__(name)
        self.said = said

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        if "reap" in argv:
            self.ran.append(list(argv))
            return CommandResult(0, protocol.encode("reaped", **self.said), "")
        return super().run(argv, timeout=timeout, env=env, cwd=cwd)


def test_a_process_of_the_run_still_there_after_the_cleanup_is_said_with_the_run_id(
        caplog: pytest.LogCaptureFixture) -> None:
    run_id = "cd" * 16
    session = ReapingSession("node-a", {"count": 0, "removed": True, "lingering": 1})
    n = node("node-a", 0, session, tmpdir=TMP, proc=object())
    with caplog.at_level("WARNING", logger="nodetune.collective.cleanup"):
        assert cleanup.cleanup([n], lambda _e: None, run_id, stop=lambda _n: None) == {}
    assert [a for a in session.ran if "reap" in a] == [
        ["python3", f"{TMP}/nodetune_worker.py", "reap", run_id, "--remove", TMP]]
    assert any("node-a: 1 process(es) of run " + run_id in r.getMessage()
               for r in caplog.records), caplog.text
    caplog.clear()
    quiet = ReapingSession("node-a", {"count": 0, "removed": True, "lingering": 0})
    with caplog.at_level("WARNING", logger="nodetune.collective.cleanup"):
        cleanup.cleanup([node("node-a", 0, quiet, tmpdir=TMP, proc=object())],
                        lambda _e: None, run_id, stop=lambda _n: None)
    assert "still there" not in caplog.text
