"""What validate's launch asks of the nodes, in order: every connection, command, upload,
start, line sent and close a pair's run makes over SSH (one session per node) and under
Slurm (the controller's session of one allocation), recorded at the session boundary.

The workers are scripted stand-ins: each says it launched, answers the probe, and on its
launch spec reports one size and ends (or ends at once, as a node without Python does).
The lab's integration tests run the same calls for real; this pins their sequence, so a
change of how the launch is carried out (the executors) cannot change what the nodes see.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import launch
from nodetune.collective import plan as plan_mod
from nodetune.errors import LaunchError
from nodetune.measure import protocol
from nodetune.remote import ssh
from nodetune.remote.session import CommandResult
from nodetune.remote.ssh_config import ConnectSpec
from nodetune.slurm.allocation import Allocation
from nodetune.validate import slurm_pair
from tests.fake_stream import FakeStream

RUN_ID = "0123456789abcdef" * 2
TMP = "/tmp/nodetune-validate.AbC123xY"
WORKDIR = f"/tmp/nodetune-validate.{RUN_ID}"
SLURM = {"node-a": "nid001", "node-b": "nid002"}
SIZE = {"bytes": 1024, "count": 256, "type": "float", "time_us": 10.0, "algbw": 0.1,
        "busbw": 0.1, "wrong": 0, "world": 2, "launch": "eager"}


def probe(rank: int) -> dict[str, Any]:
    return {"python": "3.12.3", "torch": "2.11.0", "cuda_devices": 0,
            "free_port": 29500 if rank == 0 else None, "iface": "eth1",
            "interfaces": ["lo", "eth0", "eth1"], "rdma_interfaces": [],
            "ssh_iface": "eth0", "gloo": True}


def line(event: str, **fields: object) -> str:
    return protocol.encode(event, **fields).rstrip("\n")


def before_spec(rank: int) -> list[str]:
    return [line("launched", pgid=4200 + rank, hostname=f"h{rank}"),
            line("probe", **probe(rank))]


def after_spec(rank: int) -> list[str]:
    out = [line("started", node_rank=rank)]
    if rank == 0:
        out.append(line("init", world=2, backend="gloo", init_s=0.0))
    out += [line("node", node_rank=rank, device="cpu"),
            line("progress", node_rank=rank, bytes=1024)]
    if rank == 0:
        out += [line("size", **SIZE), line("done", world=2)]
    return out


def plan(**options: Any) -> plan_mod.Plan:
    def host(name: str, **vars_: object) -> Host:
        return Host(name, ("gpu_nodes",), {"nodetune_python": "/opt/py/bin/python",
                                           **vars_})
    return plan_mod.plan_pair(
        plan_mod.Pair(host("node-a", ansible_host="10.0.0.1"),
                      host("node-b", ansible_host="10.0.0.2")),
        plan_mod.Options(timeout=5.0, **options))


def spec_of(data: bytes) -> list[Any]:
    """A launch spec as recorded: its JSON lines."""
    return [json.loads(raw) for raw in data.splitlines() if raw.strip()]


# --- over SSH: one session per node ------------------------------------------------------

class Worker(FakeStream):
    """A node's started worker: its lines before the launch spec, the rest after it."""

    def __init__(self, rank: int, log: list[Any], *, dies: bool) -> None:
        super().__init__()
        self.rank, self.log, self.dies = rank, log, dies
        if dies:
            self.queue.put("sh: 1: exec: /opt/py/bin/python: not found")
            self.end(127)
        else:
            for text in before_spec(rank):
                self.queue.put(text)

    def send(self, data: bytes) -> None:
        self.log.append(("send", spec_of(data)))
        for text in after_spec(self.rank):
            self.queue.put(text)
        self.end(0)

    def close(self) -> None:
        self.log.append(("close stdin",))


class Node:
    """One node's sessions (the run's, and any fresh one of the cleanup), recording into
    one log per node: the nodes run at once, each node's calls in its own order."""

    def __init__(self, name: str, rank: int, *, dies: bool, reap_ok: bool) -> None:
        self.name, self.rank, self.dies, self.reap_ok = name, rank, dies, reap_ok
        self.log: list[Any] = []


class Session:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.spec = ConnectSpec(host=node.name, address=node.name)

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        self.node.log.append(("run", list(argv), dict(env) if env is not None else None, cwd,
                              timeout))
        if argv[:2] == ["sh", "-c"]:
            return CommandResult(0, f"/tmp\n{TMP}\n", "")
        if "reap" in argv and "--remove" in argv:
            if self.node.reap_ok:
                return CommandResult(0, protocol.encode("reaped", count=0, removed=True,
                                                        group_alive=False), "")
            return CommandResult(1, "", "no such file")
        if argv[:3] == ["kill", "-s", "0"]:
            return CommandResult(1, "", "no such process")
        return CommandResult(0, "", "")

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Worker:
        self.node.log.append(("start", list(argv), dict(env) if env is not None else None,
                              cwd))
        return Worker(self.node.rank, self.node.log, dies=self.node.dies)

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        self.node.log.append(("upload", path, hashlib.sha256(data).hexdigest()[:12], mode))

    def close(self) -> None:
        self.node.log.append(("close",))


def over_ssh(monkeypatch: pytest.MonkeyPatch, *, dies: bool = False, reap_ok: bool = True,
             **options: Any) -> tuple[dict[str, list[Any]], Any]:
    """A pair's run over SSH: each node's log, and what the run returned or raised."""
    nodes = {n: Node(n, r, dies=dies, reap_ok=reap_ok)
             for r, n in enumerate(("node-a", "node-b"))}

    def connect(host: Host, **kw: Any) -> Session:
        nodes[host.name].log.append(("connect", host.vars.get("ansible_host"), sorted(kw.items())))
        return Session(nodes[host.name])

    monkeypatch.setattr(ssh, "connect", connect)
    monkeypatch.setattr(launch, "new_run_id", lambda: RUN_ID)
    try:
        result: Any = launch.run_pair(plan(**options))
    except LaunchError as exc:
        result = exc
    return {n: node.log for n, node in nodes.items()}, result


def spec(rank: int) -> dict[str, Any]:
    """The launch spec each node's worker is sent (gloo: the probes found no GPU)."""
    return {"argv": ["measure", "--backend", "gloo", "--sizes",
                     "1048576,4194304,16777216,67108864", "--iters", "20", "--warmup", "5",
                     "--timeout", "5", "--launch", "auto", "--collective", "all_reduce"],
            "env": {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "INFO",
                    "NCCL_DEBUG_SUBSYS": "INIT,NET,TUNING,ENV", "NCCL_SOCKET_IFNAME": "eth1",
                    "PYTHONUNBUFFERED": "1"},
            "master_addr": "10.0.0.1", "nnodes": 2, "node_rank": rank, "nproc": 1,
            "port": 29500}


SPEC_A, SPEC_B = spec(0), spec(1)


FILES = {name: hashlib.sha256(data).hexdigest()[:12]
         for name, data in launch.worker_files().items()}


def ssh_start(rank: int) -> list[Any]:
    argv = ["/opt/py/bin/python", "nodetune_worker.py", "launch", "--", "/opt/py/bin/python",
            "nodetune_worker.py", "serve", "--master", "10.0.0.1"]
    return [*argv, "--free-port"] if rank == 0 else argv


def ssh_preflight(name: str, rank: int) -> list[Any]:
    address = {"node-a": "10.0.0.1", "node-b": "10.0.0.2"}[name]
    return [
        ("connect", address, [("accept_new_host_keys", False), ("timeout", 5.0)]),
        ("run", ["sh", "-c", launch.MKTEMP], {"NODETUNE_RUN_ID": RUN_ID}, None, 5.0),
        *[("upload", f"{TMP}/{f}", h, 0o644) for f, h in FILES.items()],
        ("start", ssh_start(rank), {"PYTHONUNBUFFERED": "1", "NODETUNE_RUN_ID": RUN_ID},
         TMP),
    ]


def test_a_pair_over_ssh_makes_these_calls_in_this_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    logs, result = over_ssh(monkeypatch)
    assert isinstance(result, launch.Measurement), result
    assert [r.bytes for r in result.sizes] == [1024]
    for rank, name in enumerate(("node-a", "node-b")):
        log = logs[name]
        assert log == [
            *ssh_preflight(name, rank),
            ("send", [spec(rank)]),
            ("close stdin",),
            ("run", ["true"], None, None, 5.0),
            ("run", ["/opt/py/bin/python", f"{TMP}/nodetune_worker.py", "reap", RUN_ID,
                     "--remove", TMP, "--group", str(4200 + rank)], None, "/", 10.0),
            ("close",),
        ]


def test_a_pair_over_ssh_whose_workers_end_at_once_is_cleaned_step_by_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    logs, result = over_ssh(monkeypatch, dies=True, reap_ok=False)
    assert isinstance(result, LaunchError) and "not found or not executable" in result.message
    assert result.host == "node-a"
    for rank, name in enumerate(("node-a", "node-b")):
        assert logs[name] == [
            *ssh_preflight(name, rank),
            ("close stdin",),
            ("run", ["true"], None, None, 5.0),
            ("run", ["/opt/py/bin/python", f"{TMP}/nodetune_worker.py", "reap", RUN_ID,
                     "--remove", TMP], None, "/", 10.0),
            ("run", ["/opt/py/bin/python", "nodetune_worker.py", "reap", RUN_ID], None, TMP,
             10.0),
            ("run", ["rm", "-rf", "--", TMP], None, None, 10.0),
            ("close",),
        ]


# --- under Slurm: one srun step of the allocation, started on the controller --------------

class Step(FakeStream):
    """srun --label's output for the pair's step: each task's step mark, its lines before
    the spec, and the rest once the spec for its node came."""

    def __init__(self, log: list[Any], *, dies: bool, hangs: bool) -> None:
        super().__init__()
        self.log, self.dies, self.hangs = log, dies, hangs
        self.sent: set[str] = set()
        self.lock = threading.Lock()
        for task, node in enumerate(SLURM.values()):
            self.queue.put(f"{task}: nodetune-slurm-step 42.3 {node}")
        if dies:
            self.queue.put("srun: error: nid001: task 0: Exited with exit code 127")
            self.queue.put("srun: error: nid002: task 1: Exited with exit code 127")
            self.end(1)
            return
        for task in range(2):
            for text in before_spec(task):
                self.queue.put(f"{task}: {text}")

    def send(self, data: bytes) -> None:
        docs = spec_of(data)
        self.log.append(("send", docs))
        with self.lock:
            for doc in docs:
                task = list(SLURM.values()).index(doc["slurm_node"])
                self.sent.add(doc["slurm_node"])
                for text in after_spec(task):
                    self.queue.put(f"{task}: {text}")

    def close(self) -> None:
        self.log.append(("close stdin",))
        if self.hangs:
            return
        if self.status is None:
            self.end(0)


class Controller:
    def __init__(self, *, dies: bool, hangs: bool) -> None:
        self.dies, self.hangs = dies, hangs
        self.log: list[Any] = []
        self.spec = ConnectSpec(host="ctl", address="ctl")

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        self.log.append(("run", list(argv), env, cwd, timeout))
        return CommandResult(0, "", "")

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Step:
        self.log.append(("start", list(argv), env, cwd))
        return Step(self.log, dies=self.dies, hangs=self.hangs)

    def upload(self, data: bytes, path: str, *, mode: int = 0o644) -> None:
        self.log.append(("upload", path))

    def close(self) -> None:
        self.log.append(("close",))


def under_slurm(monkeypatch: pytest.MonkeyPatch, *, dies: bool = False, hangs: bool = False
                ) -> tuple[list[Any], Allocation, Any]:
    ctl = Controller(dies=dies, hangs=hangs)
    alloc = Allocation(session=ctl, where="ctl", job="42",  # type: ignore[arg-type]
                       names=dict(SLURM), run_id=RUN_ID, workdir=WORKDIR,
                       lock=threading.Lock())
    monkeypatch.setattr(slurm_pair, "CLEANUP_TIMEOUT", 0.3)  # how long a stopped step has
    try:
        result: Any = slurm_pair.run_pair_slurm(plan(), alloc)
    except LaunchError as exc:
        result = exc
    return ctl.log, alloc, result


def _case(node: str, rank: int) -> str:
    free = " --free-port" if rank == 0 else ""
    return (f"  {node}) exec env PYTHONUNBUFFERED=1 NODETUNE_RUN_ID={RUN_ID} "
            f"/opt/py/bin/python nodetune_worker.py launch -- /opt/py/bin/python "
            f"nodetune_worker.py serve --master 10.0.0.1{free} ;;")


STEP_ARGV = [
    "srun", "--jobid=42", "--overlap", "--job-name=nodetune-pair-node-a-node-b", "-N", "2",
    "-n", "2", "--ntasks-per-node=1", "-w", "nid001,nid002", "--kill-on-bad-exit=0",
    "--quiet", f"--chdir={WORKDIR}", "--label", "sh", "-c", "\n".join([
        'node="${SLURMD_NODENAME:-}"',
        '[ -n "$node" ] || { read -r node < /proc/sys/kernel/hostname; node="${node%%.*}"; }',
        'export SLURMD_NODENAME="$node"',
        'echo "nodetune-slurm-step $SLURM_JOB_ID.$SLURM_STEP_ID $node"',
        'case "$node" in', _case("nid001", 0), _case("nid002", 1),
        '  *) echo "no command for node $node" >&2; exit 2 ;;', "esac"])]


def test_a_pair_under_slurm_makes_these_calls_in_this_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log, alloc, result = under_slurm(monkeypatch)
    assert isinstance(result, launch.Measurement), result
    assert [r.bytes for r in result.sizes] == [1024]
    assert log == [
        ("start", STEP_ARGV, None, None),
        ("send", [{**SPEC_A, "slurm_node": "nid001"}]),
        ("send", [{**SPEC_B, "slurm_node": "nid002"}]),
        ("close stdin",),
    ]
    assert alloc.steps == [{"name": "nodetune-pair-node-a-node-b",
                            "nodes": ["nid001", "nid002"], "step": "42.3"}]


def test_a_pair_under_slurm_whose_step_does_not_stop_is_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log, _, result = under_slurm(monkeypatch, hangs=True)
    assert isinstance(result, launch.Measurement), result
    assert log == [
        ("start", STEP_ARGV, None, None),
        ("send", [{**SPEC_A, "slurm_node": "nid001"}]),
        ("send", [{**SPEC_B, "slurm_node": "nid002"}]),
        ("close stdin",),
        ("run", ["scancel", "42.3"], None, None, 30),
    ]


def test_a_pair_under_slurm_whose_workers_end_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log, _, result = under_slurm(monkeypatch, dies=True)
    assert isinstance(result, LaunchError), result
    assert result.host == "node-a" and "could not run the worker (exit 1: srun: error: " \
        "nid001: task 0: Exited with exit code 127)" in result.message
    assert log == [("start", STEP_ARGV, None, None), ("close stdin",)]
