"""The controller's side of RAS on a stall: the worker's ``ras`` verb really runs (the
uploaded files in a temp dir, through nodetune's LocalSession, as under
``ansible_connection: local``) against the stand-in RAS server of test_validate_ras
(``FakeRas``, replaying NCCL 2.28.9's real JSON); the workers' output streams are
test_validate_watch's ``FakeProcess``. Only NCCL and the ranks are stood in for."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import launch as launch_mod
from nodetune.collective import ras, ras_ask
from nodetune.collective.answers import NodeProbe
from nodetune.collective.datapath import Request
from nodetune.collective.launch import worker_files
from nodetune.collective.nodes import RunNode
from nodetune.collective.plan import NodePlan
from nodetune.errors import NodeTimeout
from nodetune.remote.session import LocalSession
from nodetune.remote.ssh_config import ConnectSpec
from nodetune.remote.ssh_executor import SshExecutor, over_session
from tests.unit.test_validate_ras import DEAD, HEALTHY, FakeRas
from tests.unit.test_validate_watch import FakeProcess, proc, started


class CountingSession(LocalSession):
    """nodetune's LocalSession, counting the commands it ran."""

    def __init__(self, name: str) -> None:
        super().__init__(ConnectSpec(host=name, address=name, local=True))
        self.argvs: list[list[str]] = []

    def run(self, argv: Any, **kwargs: Any) -> Any:
        self.argvs.append(list(argv))
        return super().run(argv, **kwargs)


def run_nodes(tmp_path: Path) -> list[RunNode]:
    for name, data in worker_files().items():
        (tmp_path / name).write_bytes(data)
    out = []
    for rank, (name, addr) in enumerate((("node-a", "192.0.2.2"), ("node-b", "node-b"))):
        host = Host(name=name, groups=(), vars={"ansible_host": addr})
        out.append(RunNode(NodePlan(host=host, rank=rank, python=sys.executable, env={},
                                    data=Request("test")),
                           runner=over_session(name, CountingSession(name)), tmpdir=str(tmp_path),
                           proc=FakeProcess()))
    return out


# node-b's bootstrap address is one its probe reported, not its inventory address.
PROBES = [NodeProbe(host="node-a", python="3", torch="2", cuda_devices=1, free_port=None,
                    raw={"addresses": ["192.0.2.2"]}),
          NodeProbe(host="node-b", python="3", torch="2", cuda_devices=1, free_port=None,
                    raw={"addresses": ["10.1.1.2", "192.0.2.3"]})]


@pytest.fixture
def fake_ras():  # type: ignore[no-untyped-def]
    made: list[FakeRas] = []

    def make(**kwargs: str) -> FakeRas:
        made.append(FakeRas(**kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()


def session(node: RunNode) -> CountingSession:
    assert node.runner is not None and isinstance(node.runner.executor, SshExecutor)
    counting = node.runner.executor.sessions[node.name]
    assert isinstance(counting, CountingSession)
    return counting


def test_a_dead_rank_names_its_node_in_the_message_and_report(tmp_path: Path,
                                                               fake_ras) -> None:  # type: ignore[no-untyped-def]
    server = fake_ras(status=DEAD)
    ns = run_nodes(tmp_path)
    result = ras_ask.ask(ns[0], "nccl", {"NCCL_RAS_ADDR": server.addr})
    assert server.commands[0] == "CLIENT PROTOCOL 2"
    assert session(ns[0]).argvs[0][2:] == ["ras", "--timeout", f"{ras_ask.RAS_TIMEOUT_S:g}", "--addr", server.addr]
    exc = NodeTimeout("no progress for 1 s at the first size", host="node-a")
    ras_ask.attach(exc, result, ns, PROBES)
    assert exc.host == "node-b"
    assert "NCCL RAS: dead rank 1 (pid 4711 on 192.0.2.3 GPU 0)" in exc.message
    assert "it is named, not node-a" in exc.message
    assert exc.sections is not None
    assert exc.sections["ras"]["dead_nodes"] == ["node-b"]
    assert ras_ask.from_sections(exc.sections) == ("node-b",)
    [missing] = exc.sections["ras"]["communicators"][0]["missing"]
    assert (missing["rank"], missing["host"], missing["pid"], missing["dead"]) == (
        1, "192.0.2.3", 4711, True)


def test_a_healthy_answer_changes_no_blame(tmp_path: Path, fake_ras) -> None:  # type: ignore[no-untyped-def]
    server = fake_ras(status=HEALTHY)
    ns = run_nodes(tmp_path)
    exc = NodeTimeout("no progress", host=None)
    ras_ask.attach(exc, ras_ask.ask(ns[0], "nccl", {"NCCL_RAS_ADDR": server.addr}), ns, PROBES)
    assert exc.host is None
    assert exc.message.endswith("; NCCL RAS: 1 communicator(s), every rank answered, "
                                "no async error")
    assert exc.sections is not None and exc.sections["ras"]["healthy"] is True
    assert "dead_nodes" not in exc.sections["ras"]


def test_ras_not_running_is_said_and_blame_is_todays(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    addr = f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    ns = run_nodes(tmp_path)
    exc = NodeTimeout("stopped after 0 bytes while its peer went on", host="node-b")
    ras_ask.attach(exc, ras_ask.ask(ns[0], "nccl", {"NCCL_RAS_ADDR": addr}), ns, PROBES)
    assert exc.host == "node-b"
    assert exc.message.endswith(f"; NCCL RAS: {ras.NOT_RUNNING}")
    assert exc.sections == {"ras": {"ok": False, "reason": ras.NOT_RUNNING}}


@pytest.mark.parametrize(("backend", "env", "reason"), [
    ("gloo", {}, ras_ask.NOT_APPLICABLE),
    ("nccl", {"NCCL_RAS_ENABLE": "0"}, "RAS off (NCCL_RAS_ENABLE=0 in the run's environment)"),
    ("nccl", {"NCCL_RAS_ADDR": "nohost"}, "not asked: NCCL_RAS_ADDR: RAS address 'nohost' "
     "is not HOST:PORT"),
])
def test_not_asked_runs_nothing_on_the_node(tmp_path: Path, backend: str, env: dict[str, str],
                                            reason: str) -> None:
    ns = run_nodes(tmp_path)
    assert ras_ask.ask(ns[0], backend, env) == {"ok": False, "reason": reason}
    assert session(ns[0]).argvs == []


def test_a_silent_node_is_not_asked(tmp_path: Path) -> None:
    ns = run_nodes(tmp_path)
    ns[0].silent = True
    assert ras_ask.ask(ns[0], "nccl", {})["reason"] == (
        "not asked: rank 0's node does not answer over SSH")
    assert session(ns[0]).argvs == []


def test_a_garbled_event_from_the_node_is_rebuilt_from_known_fields() -> None:
    got = ras_ask.checked({"event": "ras", "ok": True, "communicators": [
        "junk", {"hash": "0x1", "size": "two", "missing": [
            {"rank": "1", "host": "h", "pid": 7, "dead": "yes", "extra": [1]}, 3],
         "errors": [{"rank": 0, "host": "h", "async_error": 6, "abort": True}],
         "behind": [{"rank": 2, "host": "h", "ops": {"AllReduce": [1, 2], "Bad": ["x", 2]}},
                    {"rank": 3, "host": "h"}]}]})
    [comm] = got["communicators"]
    assert comm["size"] is None
    assert comm["missing"] == [{"host": "h", "rank": None, "pid": 7, "cuda_dev": None,
                                "unresponsive": False, "dead": False}]
    assert comm["errors"][0]["async_error"] == 6 and comm["errors"][0]["abort"] is True
    assert [(r["rank"], r["ops"]) for r in comm["behind"]] == [(2, {"AllReduce": [1, 2]})]
    assert got["healthy"] is False
    assert ras.summary(got)  # summary reads every rebuilt field


def plan_stub(backend: str, env: dict[str, str]) -> Any:
    launch = SimpleNamespace(backend=backend, nproc_per_node=1, port=29500,
                             env={"node-a": env, "node-b": {}}, spec=lambda _plan: {})
    return SimpleNamespace(complete=lambda _probes: launch, master_addr="127.0.0.1",
                           options=SimpleNamespace(timeout=0.3))


def test_a_stalled_nccl_phase_asks_ras_before_the_error_leaves_measure(
        tmp_path: Path, fake_ras) -> None:  # type: ignore[no-untyped-def]
    server = fake_ras(status=DEAD)
    ns = run_nodes(tmp_path)
    started(ns)
    proc(ns[0]).say("init", world=2, backend="nccl", init_s=0.1)
    with pytest.raises(NodeTimeout) as err:
        launch_mod.measure(plan_stub("nccl", {"NCCL_RAS_ADDR": server.addr}), ns, PROBES, {},
                           lambda _e: None)
    assert err.value.host == "node-b"
    assert "dead rank 1" in err.value.message
    assert err.value.sections is not None and "ras" in err.value.sections


def test_a_stall_before_the_ranks_joined_does_not_ask(tmp_path: Path) -> None:
    ns = run_nodes(tmp_path)
    started(ns)
    with pytest.raises(NodeTimeout) as err:
        launch_mod.measure(plan_stub("nccl", {}), ns, PROBES, {}, lambda _e: None)
    assert "RAS" not in err.value.message and not err.value.sections
    assert all("ras" not in argv for argv in session(ns[0]).argvs)


def test_a_gloo_stall_says_not_applicable_once(tmp_path: Path) -> None:
    ns = run_nodes(tmp_path)
    started(ns)
    proc(ns[0]).say("init", world=2, backend="gloo", init_s=0.1)
    with pytest.raises(NodeTimeout) as err:
        launch_mod.measure(plan_stub("gloo", {}), ns, PROBES, {}, lambda _e: None)
    assert err.value.message.count(ras_ask.NOT_APPLICABLE) == 1
    assert all("ras" not in argv for argv in session(ns[0]).argvs)


class Record:
    """Stands in for the run record's file: keeps the document it is given."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}

    def write(self, doc: dict[str, Any], **_kw: Any) -> None:
        self.doc = doc


def test_report_json_keeps_the_ras_key(tmp_path: Path, fake_ras) -> None:  # type: ignore[no-untyped-def]
    from nodetune.slurm.allocation import Held
    from nodetune.slurm.prepare import Prepared
    from nodetune.validate import verb

    server = fake_ras(status=DEAD)
    ns = run_nodes(tmp_path)
    exc = NodeTimeout("no progress", host=None)
    ras_ask.attach(exc, ras_ask.ask(ns[0], "nccl", {"NCCL_RAS_ADDR": server.addr}), ns, PROBES)
    record = Record()
    verb._record_failure(exc, SimpleNamespace(launcher=None, report_path=None),  # type: ignore[arg-type]
                         Prepared(), held=Held(), base={}, record=record,  # type: ignore[arg-type]
                         listen=None)  # type: ignore[arg-type]
    assert record.doc["error"]["host"] == "node-b"
    assert "dead rank 1" in record.doc["error"]["message"]
    assert record.doc["ras"]["communicators"][0]["missing"][0]["pid"] == 4711


def test_the_worker_event_keeps_attempts_note_and_the_missing_count() -> None:
    event = {"ok": True, "addr": "localhost:28028", "nccl_version": "2.28.9", "attempts": 3,
             "note": "read with the comma NCCL 2.28.7-2.28.9 leave out ... put back",
             "communicators": [{"hash": "0x1", "size": 2, "missing_ranks_count": 1,
                                "missing": "not a list", "errors": None, "behind": 5}]}
    got = ras_ask.checked(event)
    assert got["attempts"] == 3 and got["note"].startswith("read with the comma")
    assert got["healthy"] is False and got["communicators"][0]["missing"] == []
    assert ras_ask.checked({"ok": True, "communicators": "x"})["communicators"] == []
