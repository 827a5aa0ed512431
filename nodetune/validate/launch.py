"""Carry out a validation plan: connect, probe, start, watch, clean up. Nothing is decided
here: the plan (:mod:`~nodetune.validate.plan`) is completed once from the probes.

Every remote step has a deadline. Whatever happens (success, timeout, a side
dying, Ctrl-C) :func:`run_pair` kills the process groups it started on both
nodes and removes its temporary directories before returning or raising.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import posixpath
import queue
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

from nodetune.errors import LaunchError, NodeTimeout, NodetuneError
from nodetune.remote import ssh
from nodetune.validate import plan as plan_mod
from nodetune.validate import protocol
from nodetune.validate.datapath import IFNAME, Interfaces
from nodetune.validate.plan import Launch, NodePlan, NodeProbe, Plan
from nodetune.validate.result import SizeResult

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0
# Cleanup and the "who stopped answering" check must not hang on a frozen node.
CLEANUP_TIMEOUT = 10.0
ANSWER_TIMEOUT = 5.0
# The most the cleanup of all nodes may take before the run ends anyway.
CLEANUP_BUDGET = 2 * CLEANUP_TIMEOUT
KEEP_LINES = 20000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ValidateEvent:
    """Something worth showing while a validation runs (phase, host, a finished size)."""

    phase: str          # connect, preflight, launch, measure, cleanup
    message: str
    host: str | None = None
    size: SizeResult | None = None


OnValidateEvent = Callable[[ValidateEvent], None]


@dataclass(frozen=True, slots=True)
class Measurement:
    """What the two nodes reported, under the completed plan."""

    launch: Launch
    world: int
    sizes: tuple[SizeResult, ...]
    logs: dict[str, tuple[str, ...]]
    phases_s: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Node:
    plan: NodePlan
    session: ssh.Session | None = None
    tmpdir: str | None = None
    proc: ssh.Process | None = None
    pgid: int | None = None
    started: bool = False
    progress_bytes: int = 0
    exit_status: int | None = None
    eof: bool = False
    # Did not answer over SSH when the run stalled (frozen): cleanup tries it once, briefly.
    silent: bool = False
    errors: list[str] = field(default_factory=list)
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=KEEP_LINES))

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def rank(self) -> int:
        return self.plan.rank


def worker_files() -> dict[str, bytes]:
    """The files uploaded to each node: the worker and the protocol module it imports."""
    here = resources.files("nodetune.validate")
    return {plan_mod.WORKER_NAME: here.joinpath("worker.py").read_bytes(),
            plan_mod.PROTOCOL_NAME: here.joinpath("protocol.py").read_bytes()}


def _parallel(fn: Callable[[_Node], T], nodes: Sequence[_Node]) -> list[T]:
    """Run ``fn`` on both nodes at once; re-raise the first node's error (by rank)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = [pool.submit(fn, n) for n in nodes]
        errors = [f.exception() for f in futures]
    for exc in errors:
        if exc is not None:
            raise exc
    return [f.result() for f in futures]


def run_pair(plan: Plan, *, progress: OnValidateEvent = lambda _e: None) -> Measurement:
    """Carry out ``plan`` on its two nodes and collect what they measured.

    Raises:
        SSHError: a node is unreachable or refuses the login (exit 3).
        LaunchError: no python/torch on a node, the nodes cannot run the plan, or the
            worker died (exit 3).
        NodeTimeout: a phase made no progress within the plan's timeout (exit 4).
    """
    opts = plan.options
    nodes = [_Node(n) for n in plan.nodes]
    run_id = uuid.uuid4().hex
    phases: dict[str, float] = {}
    failure: NodetuneError | None = None
    try:
        t0 = time.monotonic()
        for n in nodes:
            progress(ValidateEvent("connect", f"connecting to {n.plan.host.address}", n.name))
        _parallel(lambda n: _connect(n, opts.accept_new_host_keys, opts.timeout), nodes)
        phases["connect"] = time.monotonic() - t0

        t0 = time.monotonic()
        files = worker_files()
        probes = _parallel(lambda n: _preflight(n, files, plan.master_addr, opts.timeout,
                                                progress, run_id), nodes)
        launch = plan.complete(probes)
        phases["preflight"] = time.monotonic() - t0

        progress(ValidateEvent(
            "launch", f"launching {launch.backend} all_reduce: {len(nodes)} node(s) x "
            f"{launch.nproc_per_node} rank(s), master {plan.master_addr}:{launch.port}"))
        t0 = time.monotonic()
        for n in nodes:  # the worker that answered the probe starts the ranks
            assert n.proc is not None
            try:
                n.proc.send((json.dumps(launch.spec(n.plan)) + "\n").encode())
            except (OSError, EOFError) as exc:
                raise LaunchError(f"the worker stopped before its ranks could start ({exc})",
                                  host=n.name) from None
        watch = _Watch(nodes, opts.timeout, progress, f"{plan.master_addr}:{launch.port}")
        results, init = watch.run(phases, t0)
        return Measurement(
            launch=launch, world=int(init.get("world", len(nodes) * launch.nproc_per_node)),
            sizes=tuple(results), logs={n.name: tuple(n.lines) for n in nodes},
            phases_s=phases)
    except NodetuneError as exc:
        failure = exc
        raise
    finally:
        t0 = time.monotonic()
        left = _cleanup(nodes, progress, run_id)
        phases["cleanup"] = time.monotonic() - t0
        if failure is not None and left:
            # The error is what the run record and the last line say: it says this too.
            failure.message += "; " + "; ".join(f"not cleaned up on {name}: {what}"
                                                for name, what in left.items())


def _connect(node: _Node, accept_new_host_keys: bool, timeout: float) -> None:
    node.session = ssh.connect(node.plan.host, accept_new_host_keys=accept_new_host_keys,
                               timeout=min(timeout, CONNECT_TIMEOUT))


def _preflight(node: _Node, files: dict[str, bytes], master_addr: str, timeout: float,
               progress: OnValidateEvent, run_id: str) -> NodeProbe:
    """Start the node's worker (``serve``) and read its probe answer; it then waits for
    the launch spec, so torch is imported once per node."""
    session = node.session
    assert session is not None
    python = node.plan.python
    # mktemp on the node: a fresh 0700 directory per run, so runs never share files.
    made = session.run(["sh", "-c", _MKTEMP], timeout=timeout, env={protocol.RUN_VAR: run_id})
    if made.exit_status != 0:
        raise LaunchError(f"cannot create a temporary directory: {made.stderr.strip()}",
                          host=node.name)
    node.tmpdir = checked_tmpdir(made.stdout, host=node.name)
    for name, data in files.items():
        session.upload(data, f"{node.tmpdir}/{name}")
    progress(ValidateEvent("preflight", f"checking {python} and torch", node.name))
    argv = plan_mod.serve_argv(python, plan_mod.WORKER_NAME, master_addr=master_addr,
                               free_port=node.rank == 0)
    # The run's id marks every process it starts there, for the reaper.
    env = {"PYTHONUNBUFFERED": "1", **node.plan.env, protocol.RUN_VAR: run_id}
    node.proc = session.start(argv, env=env, cwd=node.tmpdir)
    info = _await_probe(node, timeout, progress)
    fix = (f"set {plan_mod.VAR_PYTHON} for this host to a Python that has torch "
           "(for example /opt/venv/bin/python)")
    if info is None:
        status = _ended(node)
        output = "\n".join(node.lines)
        if status in (126, 127):
            raise LaunchError(f"python {python!r} not found or not executable "
                              f"({_tail(output)}); " + fix, host=node.name)
        raise LaunchError(f"{python} could not run the worker (exit {status}: "
                          f"{_tail(output)}); it needs Python >= 3.8. " + fix, host=node.name)
    if info.get("torch_error"):
        raise LaunchError(f"torch is not importable by {python} ({info['torch_error']}); "
                          f"install torch there or {fix}", host=node.name)
    try:
        probe = NodeProbe(
            host=node.name, python=str(info.get("python")), torch=str(info.get("torch")),
            cuda_devices=int(info.get("cuda_devices") or 0),
            devices=tuple(str(d) for d in info.get("devices") or ()),
            iface=checked_iface(info.get("iface"), host=node.name),
            local_address=checked_address(info.get("local_address"), host=node.name),
            free_port=(checked_port(info["free_port"], host=node.name)
                       if info.get("free_port") is not None else None),
            nccl=_opt_str(info.get("nccl")), hostname=str(info.get("hostname", "")),
            interfaces=Interfaces(
                usable=checked_ifaces(info.get("interfaces"), host=node.name),
                rdma=checked_ifaces(info.get("rdma_interfaces"), host=node.name),
                ssh=checked_iface(info.get("ssh_iface"), host=node.name)),
            raw=info)
    except (TypeError, ValueError) as exc:
        raise LaunchError(f"the worker's probe answer is malformed ({exc}): {info}",
                          host=node.name) from None
    gpus = f", {probe.cuda_devices} GPU(s)" if probe.cuda_devices else ", no GPU"
    progress(ValidateEvent("preflight", f"python {probe.python}, torch {probe.torch}{gpus}, "
                           f"interfaces {', '.join(probe.interfaces.usable) or '?'}, "
                           f"SSH on {probe.interfaces.ssh or '-'}", node.name))
    return probe


def _await_probe(node: _Node, timeout: float,
                 progress: OnValidateEvent = lambda _e: None) -> dict[str, Any] | None:
    """The worker's probe answer, reading its output up to it (None: the worker ended
    first). The launch guard's process group is noted on the way, for the cleanup.

    Raises:
        NodeTimeout: no answer within ``timeout`` (importing torch hung).
        LaunchError: the guard reported a process group that must not be signalled.
    """
    proc = node.proc
    assert proc is not None
    found: dict[str, Any] = {}
    answered = threading.Event()

    def read() -> None:
        try:
            for line in proc.lines():
                node.lines.append(line)
                event = protocol.decode(line)
                if event is None:
                    continue
                if event["event"] == "launched":
                    node.pgid = checked_pgid(event.get("pgid"), host=node.name)
                elif event["event"] == "swept":
                    found["swept"] = event
                elif event["event"] == "probe":
                    found["probe"] = event
                    return
        except NodetuneError as exc:
            found["error"] = exc
        except Exception as exc:  # a dropped SSH channel ends the stream too
            log.debug("%s: output stream ended: %s", node.name, exc)
        finally:
            answered.set()

    threading.Thread(target=read, daemon=True).start()
    if not answered.wait(timeout):
        raise NodeTimeout(f"{node.plan.python} did not answer the probe within {timeout:g} s "
                          "(importing torch hung?)", host=node.name)
    if "error" in found:
        raise found["error"]
    if "swept" in found:
        _say_swept(node, found["swept"], progress)
    return found.get("probe")


def _say_swept(node: _Node, event: dict[str, Any], progress: OnValidateEvent) -> None:
    """Say what the worker removed of earlier runs on this node (by run id)."""
    runs = ", ".join(str(r) for r in event.get("runs") or ())
    dirs = ", ".join(str(d) for d in event.get("dirs") or ())
    what = [f"temp dir(s) {dirs}"] if dirs else []
    if event.get("killed"):
        what.append(f"{event['killed']} process(es)")
    message = f"removed what earlier runs left here: {' and '.join(what) or 'nothing'} (run {runs})"
    log.warning("%s: %s", node.name, message)
    progress(ValidateEvent("preflight", message, node.name))


def _ended(node: _Node, wait: float = 5.0) -> int | None:
    """The worker's exit status, waiting up to ``wait`` s for it (None: still running)."""
    assert node.proc is not None
    deadline = time.monotonic() + wait
    while (status := node.proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


# The node's temp root (TMPDIR, else /tmp) on the first line, the new directory on the
# second: a constant script, nothing from the inventory in it. The run's id goes into the
# directory at once, so that a later run can tell whose leftovers it finds (worker sweep).
_MKTEMP = ('root="${TMPDIR:-/tmp}"; root="${root%/}"; printf "%s\\n" "${root:-/}"; '
           'd=$(mktemp -d -p "${root:-/}" nodetune-validate.XXXXXXXX) || exit 1; '
           f'printf "%s\\n" "${protocol.RUN_VAR}" > "$d/run-id" || exit 1; '
           'printf "%s\\n" "$d"')
_TMP_NAME = re.compile(r"^nodetune-validate\.[A-Za-z0-9]{8}$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


def checked_tmpdir(stdout: str, *, host: str) -> str:
    """The directory mktemp made, if it is exactly what was asked for, under the node's tmp.

    Everything read back from a node is checked before it becomes part of a path
    or a command: an empty answer once turned into uploads to ``/``.

    Raises:
        LaunchError: anything but one absolute, normalised path
            ``<tmp root>/nodetune-validate.XXXXXXXX`` below a root that is not ``/``.
    """
    lines = stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) == 2:
        root, made = lines
        parent, _, name = made.rpartition("/")
        if (_SAFE_PATH.match(root) and _SAFE_PATH.match(made) and root != "/"
                and posixpath.normpath(made) == made and parent == root
                and _TMP_NAME.match(name)):
            return made
    raise LaunchError(f"mktemp answered {stdout!r}, not one new directory "
                      "<TMPDIR or /tmp>/nodetune-validate.XXXXXXXX; nothing was written there. "
                      "Check TMPDIR and mktemp on the node", host=host)


def checked_port(value: object, *, host: str) -> int:
    """A TCP port a node reported, if it is one nodetune may listen on (1024-65535).

    Raises:
        LaunchError: not an integer in that range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1024 <= value <= 65535:
        raise LaunchError(f"the node reported free port {value!r}, not an integer in "
                          "1024-65535", host=host)
    return value


def checked_pgid(value: object, *, host: str) -> int:
    """A process group the launch guard reported, if it is one that may be signalled.

    ``kill -- -1`` signals every process the user may; 0 is the caller's own group.

    Raises:
        LaunchError: not an integer above 1.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 1:
        raise LaunchError(f"the launch guard reported process group {value!r}; refusing to "
                          "signal it", host=host)
    return value


def checked_iface(value: object, *, host: str) -> str | None:
    """An interface a node reported, if it is an interface name.

    It may become ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` on that node.

    Raises:
        LaunchError: anything but None or a valid Linux interface name.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not IFNAME.fullmatch(value) or value in (".", ".."):
        raise LaunchError(f"the node reported interface {value!r}, not an interface name; "
                          f"set {plan_mod.VAR_IFNAME} for this host", host=host)
    return value


def checked_ifaces(value: object, *, host: str) -> tuple[str, ...]:
    """A list of interfaces a node reported (empty when it reported none).

    Raises:
        LaunchError: not a list of valid Linux interface names.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise LaunchError(f"the node reported interfaces {value!r}, not a list", host=host)
    return tuple(n for v in value if (n := checked_iface(v, host=host)) is not None)


def checked_address(value: object, *, host: str) -> str | None:
    """The local IP address a node reported, if it is one.

    Raises:
        LaunchError: anything but None or an IPv4/IPv6 address.
    """
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(str(value) if isinstance(value, str) else b""))
    except ValueError:
        raise LaunchError(f"the node reported local address {value!r}, not an IP address",
                          host=host) from None


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or "no output"


_KILLED = re.compile(r"(?:Signal (\d+) \(SIG\w+\) received|exitcode\s*:\s*-(\d+))")
_PEER_GONE = re.compile(r"(?i)connection (?:reset|closed)|broken pipe|peer|recv|Socket Timeout")


class _Watch:
    """Follow both nodes' output until the worker finishes, stalls or dies."""

    def __init__(self, nodes: list[_Node], timeout: float, progress: OnValidateEvent,
                 master: str) -> None:
        self.nodes = nodes
        self.timeout = timeout
        self.progress = progress
        self.master = master
        self.queue: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.results: list[SizeResult] = []
        self.init: dict[str, Any] = {}
        self.done = False

    def _read(self, index: int) -> None:
        proc = self.nodes[index].proc
        assert proc is not None
        try:
            for line in proc.lines():
                self.queue.put((index, line))
        except Exception as exc:  # a dropped SSH channel ends the stream too
            log.debug("%s: output stream ended: %s", self.nodes[index].name, exc)
        self.queue.put((index, None))

    def run(self, phases: dict[str, float], started: float) -> tuple[list[SizeResult],
                                                                      dict[str, Any]]:
        for i in range(len(self.nodes)):
            threading.Thread(target=self._read, args=(i,), daemon=True).start()
        phase, phase_start = "launch", started
        deadline = time.monotonic() + self.timeout
        while not (self.done and all(n.eof for n in self.nodes)):
            remaining = deadline - time.monotonic()
            if self.done:  # finished: give the processes a moment to exit, then move on
                remaining = min(remaining, 15.0)
            try:
                index, line = self.queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                if self.done:
                    break
                raise self._stalled(phase) from None
            node = self.nodes[index]
            if line is None:
                node.eof = True
                node.exit_status = _ended(node)
                if not self.done:
                    raise self._died(node, phase)
                continue
            node.lines.append(line)
            event = protocol.decode(line)
            if event is None:
                continue
            if self._handle(node, event):
                deadline = time.monotonic() + self.timeout
            if phase == "launch" and self.init:
                phases["launch"] = time.monotonic() - phase_start
                phase, phase_start = "measure", time.monotonic()
        phases["measure"] = time.monotonic() - phase_start
        init_s = float((self.init or {}).get("init_s") or 0.0)
        if "launch" in phases and 0 < init_s < phases["launch"]:
            # The worker times init_process_group + first barrier (NCCL's set-up).
            phases["launch"] -= init_s
            phases["nccl_init" if (self.init or {}).get("backend") == "nccl" else "init"] = init_s
        return self.results, self.init

    def _handle(self, node: _Node, event: dict[str, Any]) -> bool:
        try:
            return self._apply(node, event)
        except (KeyError, TypeError, ValueError) as exc:
            raise LaunchError(f"the worker sent a malformed {event.get('event')!r} event "
                              f"({type(exc).__name__}: {exc}): {event}", host=node.name) from None

    def _apply(self, node: _Node, event: dict[str, Any]) -> bool:
        kind = event.get("event")
        if kind == "launched":
            node.pgid = checked_pgid(int(event["pgid"]), host=node.name)
        elif kind == "started":
            node.started = True
        elif kind == "init":
            self.init = event
            self.progress(ValidateEvent(
                "launch", f"all {event.get('world')} ranks joined ({event.get('backend')}, "
                f"init {event.get('init_s')} s)"))
        elif kind == "node":
            self.progress(ValidateEvent("launch", f"node rank {event.get('node_rank')} on "
                                        f"{event.get('device')} x{event.get('local_world')}",
                                        node.name))
        elif kind == "progress":
            node.progress_bytes = int(event.get("bytes", 0))
        elif kind == "size":
            row = SizeResult(bytes=int(event["bytes"]), count=int(event["count"]),
                             type=str(event["type"]), time_us=float(event["time_us"]),
                             algbw=float(event["algbw"]), busbw=float(event["busbw"]),
                             wrong=int(event["wrong"]), launch=str(event.get("launch", "eager")),
                             rounds=int(event.get("rounds", 1)),
                             time_us_min=_opt_float(event.get("time_us_min")),
                             time_us_max=_opt_float(event.get("time_us_max")))
            self.results.append(row)
            self.progress(ValidateEvent("measure", "size done", size=row))
        elif kind == "done":
            self.done = True
        elif kind == "note":
            self.progress(ValidateEvent("measure", str(event.get("message")), node.name))
        elif kind == "error":
            node.errors.append(str(event.get("message")))
            return False
        else:
            return False
        return True

    def _died(self, first: _Node, phase: str) -> NodetuneError:
        # The peer of a dead node usually fails a moment later with a socket
        # error; wait briefly so that the node at fault is named, not its victim.
        end = time.monotonic() + 3.0
        while time.monotonic() < end and not all(n.eof for n in self.nodes):
            try:
                index, line = self.queue.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            other = self.nodes[index]
            if line is None:
                other.eof = True
                other.exit_status = _ended(other)
            else:
                other.lines.append(line)
                event = protocol.decode(line)
                if event is not None and event["event"] == "error":
                    self._handle(other, event)
        culprit = self._blame(first)
        where = "before all ranks joined" if phase == "launch" else (
            f"after {culprit.progress_bytes} bytes" if culprit.progress_bytes
            else "during the first size")
        detail = "; ".join(culprit.errors[:2]) or _tail(
            "\n".join(ln for ln in culprit.lines if protocol.decode(ln) is None
                      and "NCCL INFO" not in ln), 4)
        status = "still running" if culprit.exit_status is None and not culprit.eof else (
            f"exit status {culprit.exit_status}")
        return LaunchError(f"the worker died {where} ({status}): {detail}", host=culprit.name)

    def _blame(self, first: _Node) -> _Node:
        def killed(n: _Node) -> bool:
            return any(_KILLED.search(ln) for ln in n.lines)

        def own_error(n: _Node) -> bool:
            return bool(n.errors) and not all(_PEER_GONE.search(e) for e in n.errors)

        for test in (killed, own_error):
            hits = [n for n in self.nodes if test(n)]
            if len(hits) == 1:
                return hits[0]
        return first

    def _stalled(self, phase: str) -> NodeTimeout:
        secs = f"{self.timeout:g} s"
        asked = [n for n in self.nodes if n.session is not None]
        with ThreadPoolExecutor(max_workers=max(1, len(asked))) as pool:
            answers = list(pool.map(lambda n: _answers(n.session), asked))
        silent = [n for n, ok in zip(asked, answers, strict=True) if not ok]
        for n in silent:
            n.silent = True
        if len(silent) == 1:
            n = silent[0]
            return NodeTimeout(f"stopped answering: no progress for {secs} and no answer over "
                               f"SSH within {ANSWER_TIMEOUT:g} s (frozen, overloaded or cut "
                               "off)", host=n.name)
        if len(silent) == 2:
            return NodeTimeout(f"no progress for {secs} and neither node answers over SSH "
                               f"({self.nodes[0].name}, {self.nodes[1].name})")
        stopped = [n for n in self.nodes if n.session is not None and _stopped_worker(n.session)]
        if len(stopped) == 1:
            return NodeTimeout(f"stopped answering: no progress for {secs}; a worker process "
                               "there is stopped (state T: SIGSTOP or a debugger)",
                               host=stopped[0].name)
        if phase == "launch":
            silent = [n for n in self.nodes if not n.started]
            if len(silent) == 1:
                n = silent[0]
                return NodeTimeout(f"the worker did not start its ranks within {secs} (forking "
                                     "them or initialising CUDA hung)", host=n.name)
            if not silent:
                other = self.nodes[-1]
                return NodeTimeout(
                    f"the ranks did not all join within {secs}: {other.name} could not complete "
                    f"the rendezvous with {self.nodes[0].name} at {self.master}; check that "
                    f"{other.name} reaches that address (firewall, --master-addr)",
                    host=other.name)
            return NodeTimeout(f"neither node started the worker within {secs}")
        done = [n.progress_bytes for n in self.nodes]
        if len(set(done)) > 1:
            hung = min(self.nodes, key=lambda n: n.progress_bytes)
            return NodeTimeout(f"no progress for {secs}; it stopped after {hung.progress_bytes}"
                                 " bytes while its peer went on", host=hung.name)
        last = f"after {done[0]} bytes" if done[0] else "at the first size"
        names = ", ".join(n.name for n in self.nodes)
        where = (f"on either node ({names}): the all_reduce between them" if len(self.nodes) > 1
                 else f"on {names}: the all_reduce across its ranks")
        return NodeTimeout(
            f"no progress for {secs} {last} {where} never completed; raise "
            "--timeout for large sizes on slow links")


def _answers(session: ssh.Session, timeout: float = ANSWER_TIMEOUT) -> bool:
    """Whether the node runs a trivial command over ``session`` within ``timeout``."""
    try:
        return session.run(["true"], timeout=timeout).exit_status == 0
    except (NodetuneError, OSError):
        return False


def _stopped_worker(session: ssh.Session) -> bool:
    """Whether a worker process on the node is stopped (``ps`` state T)."""
    try:
        table = session.run(["ps", "-eo", "stat=,args="], timeout=ANSWER_TIMEOUT).stdout
    except (NodetuneError, OSError):
        return False
    return any(line.split(None, 1)[0].startswith("T") and plan_mod.WORKER_NAME in line
               for line in table.splitlines() if line.strip())


def _clean_with(session: ssh.Session, n: _Node, run_id: str) -> None:
    if n.pgid is not None and not ssh.kill_group(session, n.pgid):
        log.warning("%s: process group %d still alive after SIGKILL", n.name, n.pgid)
    if n.tmpdir and n.proc is not None:
        # A rank that left the guard's group (a session of its own) is still marked
        # with the run's id: sweep by it.
        swept = session.run([n.plan.python, plan_mod.WORKER_NAME, "reap", run_id],
                            timeout=CLEANUP_TIMEOUT, cwd=n.tmpdir)
        reaped = protocol.last_events(swept.stdout.splitlines()).get(
            "reaped", {}).get("count")
        if reaped:
            log.warning("%s: killed %s leftover worker process(es)", n.name, reaped)
    if n.tmpdir:
        gone = session.run(["rm", "-rf", "--", n.tmpdir], timeout=CLEANUP_TIMEOUT)
        if gone.exit_status != 0:
            raise LaunchError(f"rm -rf {n.tmpdir} failed: {_tail(gone.stderr)}", host=n.name)


def _clean_node(n: _Node, run_id: str) -> str | None:
    """Stop what this run started on ``n`` and remove its temp dir.

    The run's own connection is tried first; if it no longer answers (a wedged
    channel, a dropped connection), a fresh one with a short timeout. Returns
    None when the node is clean, else what is left there and why.
    """
    assert n.session is not None
    if n.proc is not None:
        try:
            n.proc.close()  # the launch guard kills its group on EOF as well
        except Exception as exc:  # closing a dead channel must not stop the cleanup
            log.debug("%s: closing the worker's channel: %s", n.name, exc)
    if n.tmpdir is None and n.pgid is None and n.proc is None:
        n.session.close()
        return None
    errors: list[str] = []
    # A node that just failed to answer (frozen) gets one brief try on a new connection,
    # so that the run ends within --timeout + 15 s; what is left, the next run removes.
    attempts = ("a new connection",) if n.silent else ("this run's connection",
                                                       "a new connection")
    for attempt in attempts:
        try:
            if attempt == "a new connection":
                n.session.close()
                n.session = ssh.connect(n.plan.host, timeout=ANSWER_TIMEOUT if n.silent
                                        else CLEANUP_TIMEOUT)
            elif not _answers(n.session):
                errors.append(f"{attempt} does not answer")
                continue
            _clean_with(n.session, n, run_id)
            n.session.close()
            return None
        except (NodetuneError, OSError) as exc:
            errors.append(f"{attempt}: {getattr(exc, 'message', None) or exc}")
    n.session.close()
    return f"{_left(n, run_id)}: {'; '.join(errors)}"


def _left(n: _Node, run_id: str) -> str:
    """What this run may have left on ``n``, and what removes it."""
    left = [f"temp dir {n.tmpdir}"] if n.tmpdir else []
    if n.proc is not None:
        left.append(f"worker processes of run {run_id} (the launch guard ends them when "
                    "the node notices the connection is gone)")
    return (f"{' and '.join(left)} left on the node (the next validate that reaches it "
            f"removes them, by run id {run_id})")


def _cleanup(nodes: Sequence[_Node], progress: OnValidateEvent, run_id: str) -> dict[str, str]:
    """Clean both nodes at once, and say which ones could not be cleaned and what is left.

    Returns:
        What is left on each node that could not be cleaned.
    """
    touched = [n for n in nodes if n.session is not None]
    if not touched:
        return {}
    done: dict[str, str | None] = {}

    def clean_one(n: _Node) -> None:
        done[n.name] = _clean_node(n, run_id)

    # Daemon threads, waited on up to a budget: a node that blocks the cleanup in a way
    # no timeout above catches still cannot hold the run's end (its exit code) back.
    threads = [threading.Thread(target=clean_one, args=(n,), daemon=True) for n in touched]
    for t in threads:
        t.start()
    deadline = time.monotonic() + CLEANUP_BUDGET
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    left = {n.name: done[n.name] if n.name in done else (
        f"{_left(n, run_id)}: cleanup did not finish within {CLEANUP_BUDGET:g} s")
        for n in touched}
    for name, what in left.items():
        if what:
            log.warning("%s: cleanup could not reach the node: %s", name, what)
            progress(ValidateEvent("cleanup", f"could not clean up: {what}", name))
    clean = [name for name, what in left.items() if not what]
    if clean and len(clean) == len(left):
        progress(ValidateEvent("cleanup", "stopped remote processes, removed temp dirs"))
    elif clean:
        progress(ValidateEvent("cleanup", "stopped remote processes, removed temp dirs",
                               clean[0]))
    return {name: what for name, what in left.items() if what}


__all__ = ["Measurement", "OnValidateEvent", "ValidateEvent", "run_pair"]
