"""The launcher's watch over both nodes' output, with fake processes standing in for the
SSH channels (the real ones are exercised in tests/integration/test_validate.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective.datapath import Request
from nodetune.collective.nodes import RunNode, ValidateEvent
from nodetune.collective.plan import NodePlan
from nodetune.collective.watch import Watch
from nodetune.collective.worker import cli
from nodetune.collective.worker_cmd import WORKER_NAME
from nodetune.errors import LaunchError, NodeTimeout
from nodetune.measure import protocol
from nodetune.remote.session import CommandResult
from nodetune.remote.ssh_config import ConnectSpec
from nodetune.remote.ssh_executor import over_session
from tests.fake_stream import FakeStream

MASTER = "10.0.0.1:29500"


class FakeProcess(FakeStream):
    """Stands in for a remote process: lines fed by the test, then an exit status."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []

    def say(self, event: str, **fields: object) -> FakeProcess:
        self.queue.put(protocol.encode(event, **fields).rstrip("\n"))
        return self

    def text(self, line: str) -> FakeProcess:
        self.queue.put(line)
        return self

    def exit(self, status: int) -> FakeProcess:
        self.end(status)
        return self

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        return None


def nodes() -> list[RunNode]:
    out = []
    for rank, name in enumerate(("node-a", "node-b")):
        host = Host(name=name, groups=(), vars={})
        out.append(RunNode(NodePlan(host=host, rank=rank, python="python3", env={}, data=Request("test")),
                         proc=FakeProcess()))
    return out


def proc(node: RunNode) -> FakeProcess:
    assert isinstance(node.proc, FakeProcess)
    return node.proc


def watch(ns: list[RunNode], timeout: float = 0.5) -> tuple[Watch, list[ValidateEvent]]:
    seen: list[ValidateEvent] = []
    return Watch(ns, timeout, seen.append, MASTER), seen


SIZE = {"bytes": 1024, "count": 256, "type": "float", "time_us": 10.0, "algbw": 0.1,
        "busbw": 0.1, "wrong": 0, "world": 2, "launch": "eager"}


def started(ns: list[RunNode]) -> None:
    for n in ns:
        proc(n).say("launched", pgid=100 + n.rank).say("started", node_rank=n.rank)


def test_a_run_to_the_end() -> None:
    ns = nodes()
    started(ns)
    a, b = proc(ns[0]), proc(ns[1])
    a.say("init", world=2, backend="gloo", init_s=0.0).say("node", node_rank=0, device="cpu")
    a.text("NCCL INFO plain text is kept in the log").text("@@nodetune {torn")
    b.say("node", node_rank=1, device="cpu").say("progress", node_rank=1, bytes=1024)
    a.say("progress", node_rank=0, bytes=1024).say("size", **SIZE).say("done", world=2)
    a.exit(0)
    b.exit(0)
    w, seen = watch(ns)
    phases: dict[str, float] = {}
    results, init = w.run(phases, 0.0)
    assert [r.bytes for r in results] == [1024] and init["world"] == 2
    assert [n.pgid for n in ns] == [100, 101] and [n.exit_status for n in ns] == [0, 0]
    assert {"launch", "measure"} <= set(phases)
    assert "NCCL INFO plain text is kept in the log" in ns[0].lines
    assert [e.size for e in seen if e.size is not None] == results


def test_the_killed_node_is_blamed_not_its_victim() -> None:
    ns = nodes()
    started(ns)
    proc(ns[0]).say("init", world=2, backend="gloo", init_s=0.0)
    # node-b's peer error arrives first; node-a was killed by a signal.
    proc(ns[1]).say("error", message="RuntimeError: Connection reset by peer").exit(1)
    proc(ns[0]).text(cli.rank_failed(0, 7, -9).rstrip()).exit(137)
    w, _ = watch(ns)
    with pytest.raises(LaunchError, match="died during the first size") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-a"


def test_a_node_with_its_own_error_is_blamed() -> None:
    ns = nodes()
    started(ns)
    proc(ns[0]).say("error", message="RuntimeError: Connection closed by peer").exit(1)
    proc(ns[1]).say("error", message="torch.OutOfMemoryError: CUDA out of memory").exit(1)
    w, _ = watch(ns)
    with pytest.raises(LaunchError, match=r"before all ranks joined.*CUDA out of memory") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-b"


def test_blame_falls_back_to_the_first_to_die() -> None:
    ns = nodes()
    w, _ = watch(ns)
    ns[1].errors.append("Socket Timeout")
    assert w._blame(ns[1]) is ns[1]
    assert w._blame(ns[0]) is ns[0]


def test_a_node_that_never_starts_is_named() -> None:
    ns = nodes()
    proc(ns[0]).say("launched", pgid=100).say("started", node_rank=0)
    w, _ = watch(ns, timeout=0.3)
    with pytest.raises(NodeTimeout, match=r"did not start its ranks within 0\.3 s") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-b"


def test_a_rendezvous_that_never_completes_names_the_dialling_node() -> None:
    ns = nodes()
    started(ns)
    w, _ = watch(ns, timeout=0.3)
    with pytest.raises(NodeTimeout, match=f"could not complete the rendezvous with node-a at "
                                          f"{MASTER}") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-b"


def test_neither_node_starting_names_no_node() -> None:
    w, _ = watch(nodes(), timeout=0.3)
    with pytest.raises(NodeTimeout, match="neither node") as err:
        w.run({}, 0.0)
    assert err.value.host is None


def test_the_node_that_stopped_making_progress_is_named() -> None:
    ns = nodes()
    started(ns)
    proc(ns[0]).say("init", world=2, backend="gloo", init_s=0.0)
    proc(ns[0]).say("progress", node_rank=0, bytes=4096)
    w, _ = watch(ns, timeout=0.3)
    with pytest.raises(NodeTimeout, match="stopped after 0 bytes while its peer went on") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-b"


def test_both_stuck_at_the_same_size_names_the_pair() -> None:
    ns = nodes()
    started(ns)
    proc(ns[0]).say("init", world=2, backend="gloo", init_s=0.0)
    w, _ = watch(ns, timeout=0.3)
    with pytest.raises(NodeTimeout, match=r"at the first size on either node \(node-a, node-b\)"):
        w.run({}, 0.0)


class AskedSession:
    """A node's session beside its worker (the stall diagnosis asks through the run's
    executor): ``silent`` times out on everything; ``ps`` shows the worker in ``state``."""

    def __init__(self, name: str, *, silent: bool = False, state: str = "S") -> None:
        self.spec = ConnectSpec(host=name, address=name)
        self.silent = silent
        self.state = state
        self.ran: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, **_: object) -> CommandResult:
        self.ran.append(list(argv))
        if self.silent:
            raise NodeTimeout(f"`{argv[0]}` did not finish within {timeout:g} s",
                              host=self.spec.host)
        if argv[0] == "ps":
            return CommandResult(0, f"Ss   sshd: root\n{self.state}l   python3 /tmp/d/"
                                    f"{WORKER_NAME} serve\n", "")
        return CommandResult(0, "", "")


def stalled(ns: list[RunNode], **sessions: AskedSession) -> NodeTimeout:
    """Both nodes stuck at the first size, each reached through its session."""
    for n in ns:
        n.runner = over_session(n.name, sessions[n.name.replace("-", "_")])
    started(ns)
    proc(ns[0]).say("init", world=2, backend="gloo", init_s=0.0)
    w, _ = watch(ns, timeout=0.3)
    with pytest.raises(NodeTimeout) as err:
        w.run({}, 0.0)
    return err.value


def test_a_stall_where_one_node_does_not_answer_names_that_node() -> None:
    ns = nodes()
    exc = stalled(ns, node_a=AskedSession("node-a"), node_b=AskedSession("node-b", silent=True))
    assert exc.host == "node-b"
    assert "no answer over SSH within 5 s (frozen, overloaded or cut off)" in exc.message
    assert [n.silent for n in ns] == [False, True]  # the cleanup gives it one brief try


def test_a_stall_where_one_worker_is_stopped_names_its_node() -> None:
    ns = nodes()
    a, b = AskedSession("node-a"), AskedSession("node-b", state="T")
    exc = stalled(ns, node_a=a, node_b=b)
    assert exc.host == "node-b"
    assert "a worker process there is stopped (state T" in exc.message
    assert ["ps", "-eo", "stat=,args="] in a.ran and ["true"] in b.ran


def test_a_stall_where_both_answer_and_run_names_the_pair() -> None:
    exc = stalled(nodes(), node_a=AskedSession("node-a"), node_b=AskedSession("node-b"))
    assert exc.host is None
    assert "at the first size on either node (node-a, node-b)" in exc.message


@pytest.mark.parametrize("event", [
    {"bytes": "many"}, {"pgid": None}, {},
])
def test_a_malformed_event_is_a_launch_error_naming_the_node(event: dict[str, object]) -> None:
    ns = nodes()
    kind = "launched" if "pgid" in event else "size"
    proc(ns[1]).say(kind, **event)
    w, _ = watch(ns)
    with pytest.raises(LaunchError, match=f"malformed '{kind}' event") as err:
        w.run({}, 0.0)
    assert err.value.host == "node-b"
