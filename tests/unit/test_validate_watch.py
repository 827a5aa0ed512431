"""The launcher's watch over both nodes' output, with fake processes standing in for the
SSH channels (the real ones are exercised in tests/integration/test_validate.py)."""

from __future__ import annotations

import pytest

from nodetune.ansible.inventory import Host
from nodetune.errors import LaunchError, NodeTimeout
from nodetune.validate import protocol
from nodetune.validate.datapath import Request
from nodetune.validate.nodes import RunNode, ValidateEvent
from nodetune.validate.plan import NodePlan
from nodetune.validate.watch import Watch
from nodetune.validate.worker import cli
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
