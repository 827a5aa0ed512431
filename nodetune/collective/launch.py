"""Carry out a validation plan: connect, start the workers, watch them, clean up.

What runs where is the plan's decision (:mod:`~nodetune.collective.plan`), completed once
from the nodes' probes by :meth:`~nodetune.collective.plan.Plan.complete`; what the nodes
answer is checked in :mod:`~nodetune.collective.answers` and their output followed by
:mod:`~nodetune.collective.watch`. Every remote step has
a deadline. Whatever happens (success, timeout, a side dying, Ctrl-C) :func:`run_pair`
kills the process groups it started on every node and removes its temporary
directories (:mod:`~nodetune.collective.cleanup`) before returning or raising. The run dir,
its files, the workers' start and their stop go through the SSH executor
(:class:`~nodetune.remote.ssh_executor.SshExecutor`); what follows the start
(:func:`probe_answer`, :func:`measure`) does not know the launcher.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from nodetune.collective import ras_ask, worker_cmd
from nodetune.collective.answers import MKTEMP, NodeProbe, checked_pgid, checked_tmpdir, probe_from
from nodetune.collective.at_once import on_each_node
from nodetune.collective.cleanup import cleanup
from nodetune.collective.nodes import OnValidateEvent, RunNode, ValidateEvent, ended, tail
from nodetune.collective.plan import Launch, Plan
from nodetune.collective.watch import Watch
from nodetune.collective.worker_source import worker_source
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.errors import ImageCheckFailed, ImageError, LaunchError, NodeTimeout, NodetuneError
from nodetune.measure import protocol
from nodetune.measure.host_env import VAR_PYTHON
from nodetune.measure.shm import min_shm
from nodetune.measure.sweep import SizeResult
from nodetune.remote import ssh_executor
from nodetune.remote.executor import Command
from nodetune.remote.session import new_run_id
from nodetune.remote.ssh_executor import SshExecutor

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Measurement:
    """What the two nodes reported, under the completed plan."""

    launch: Launch
    world: int
    sizes: tuple[SizeResult, ...]
    logs: dict[str, tuple[str, ...]]
    phases_s: dict[str, float] = field(default_factory=dict)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)  # --image, per node


def worker_files() -> dict[str, bytes]:
    """The files uploaded to each node: the worker (its package's modules joined into one
    file: :mod:`~nodetune.collective.worker_source`) and the modules it imports (the
    protocol, the NCCL RAS client)."""
    return {worker_cmd.WORKER_NAME: worker_source().encode("utf-8"),
            worker_cmd.PROTOCOL_NAME:
                resources.files("nodetune.measure").joinpath("protocol.py").read_bytes(),
            worker_cmd.RAS_NAME:
                resources.files("nodetune.collective").joinpath("ras.py").read_bytes()}


def run_pair(plan: Plan, *, progress: OnValidateEvent = lambda _e: None) -> Measurement:
    """Carry out ``plan`` on its two nodes and collect what they measured.

    Raises:
        SSHError: a node is unreachable or refuses the login (exit 3).
        LaunchError: no python/torch on a node, the nodes cannot run the plan, or the
            worker died (exit 3).
        NodeTimeout: a phase made no progress within the plan's timeout (exit 4).
    """
    opts = plan.options
    nodes = [RunNode(n) for n in plan.nodes]
    run_id = new_run_id()
    executor = SshExecutor({})  # each node's session, once connected
    phases: dict[str, float] = {}
    failure: NodetuneError | None = None
    try:
        t0 = time.monotonic()
        for n in nodes:
            progress(ValidateEvent("connect", f"connecting to {n.plan.host.address}", n.name))
        on_each_node(lambda n: _connect(n, opts.accept_new_host_keys, opts.timeout, executor),
                     nodes)
        phases["connect"] = time.monotonic() - t0

        t0 = time.monotonic()
        files = worker_files()
        probes = on_each_node(lambda n: _preflight(n, files, plan.master_addr, opts.timeout,
                                                   progress, run_id, opts.image),
                              nodes)
        phases["preflight"] = time.monotonic() - t0
        m = measure(plan, nodes, probes, phases, progress)
        return replace(m, containers={n.name: n.probed.to_dict() for n in nodes
                                      if n.probed is not None})
    except NodetuneError as exc:
        failure = exc
        if any(n.probed is not None for n in nodes):  # the record keeps the checklist
            exc.sections = {**(exc.sections or {}), "container": {
                n.name: n.probed.to_dict() for n in nodes if n.probed is not None}}
        raise
    finally:
        t0 = time.monotonic()
        left = cleanup(nodes, progress, run_id, stop=lambda n: executor.stop_one(n.name))
        phases["cleanup"] = time.monotonic() - t0
        if failure is not None and left:
            # The error is what the run record and the last line say: it says this too.
            failure.message += "; " + "; ".join(f"not cleaned up on {name}: {what}"
                                                for name, what in left.items())


def measure(plan: Plan, nodes: list[RunNode], probes: Sequence[NodeProbe],
            phases: dict[str, float], progress: OnValidateEvent) -> Measurement:
    """Complete the plan from the probes, send each worker its launch spec and watch the
    ranks to the end (whatever started the workers: SSH or a Slurm step)."""
    launch = plan.complete(probes)
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
    watch = Watch(nodes, plan.options.timeout, progress, f"{plan.master_addr}:{launch.port}")
    try:
        results, init = watch.run(phases, t0)
    except NodeTimeout as exc:
        if watch.init:  # a timed phase stalled (the ranks had joined): ask RAS, then clean up
            if launch.backend == "nccl":
                progress(ValidateEvent("measure", "stalled: asking NCCL's RAS on rank 0's node",
                                       nodes[0].name))
            ras_ask.attach(exc, ras_ask.ask(nodes[0], launch.backend,
                                            launch.env.get(nodes[0].name, {})), nodes, probes)
        raise
    return Measurement(
        launch=launch, world=int(init.get("world", len(nodes) * launch.nproc_per_node)),
        sizes=tuple(results), logs={n.name: tuple(n.lines) for n in nodes},
        phases_s=phases)


def _connect(node: RunNode, accept_new_host_keys: bool, timeout: float,
             executor: SshExecutor) -> None:
    node.runner = executor.add(node.plan.host, accept_new_host_keys=accept_new_host_keys,
                               timeout=min(timeout, CONNECT_TIMEOUT))


def _preflight(node: RunNode, files: dict[str, bytes], master_addr: str, timeout: float,
               progress: OnValidateEvent, run_id: str, image: str | None = None) -> NodeProbe:
    """Start the node's worker (``serve``) and read its probe answer; it then waits for
    the launch spec, so torch is imported once per node (through the run's executor,
    which :func:`_connect` gave the node)."""
    assert node.runner is not None
    over = ssh_executor.of(node.runner)
    python = node.plan.python
    # mktemp on the node: a fresh 0700 directory per run, so runs never share files.
    made = over.make_workdir(node.name, Command(["sh", "-c", MKTEMP],
                                                {protocol.RUN_VAR: run_id}), timeout=timeout)
    if made.exit_status != 0:
        raise LaunchError(f"cannot create a temporary directory: {made.stderr.strip()}",
                          host=node.name)
    node.tmpdir = checked_tmpdir(made.stdout, host=node.name)
    over.stage_one(node.name, files, node.tmpdir)
    # The run's id marks every process it starts there, for the reaper.
    env = {"PYTHONUNBUFFERED": "1", **node.plan.env, protocol.RUN_VAR: run_id}
    if image is None:
        progress(ValidateEvent("preflight", f"checking {python} and torch", node.name))
        argv = worker_cmd.serve_argv(python, worker_cmd.WORKER_NAME, master_addr=master_addr,
                                     free_port=node.rank == 0)
    else:
        argv = _image_argv(node, image, master_addr, timeout, progress, run_id, env, over)
    node.proc = over.start({node.name: Command(argv, env, cwd=node.tmpdir)},
                           name="nodetune-worker")[node.name]
    return probe_answer(node, timeout, progress)


def _image_argv(node: RunNode, image: str, master_addr: str, timeout: float,
                progress: OnValidateEvent, run_id: str, env: dict[str, str],
                executor: SshExecutor) -> list[str]:
    """``--image``: the image is on the node (else pulled), its container passes the
    checklist (:mod:`~nodetune.container.probe`, through ``executor``, which holds the
    node's session); then the worker's argv in it.

    Raises:
        LaunchError: the image is missing and cannot be pulled, or the runtime failed.
        CheckFailed: the container fails the checklist (named reasons).
    """
    assert node.tmpdir is not None
    c = ct.config(node.plan.host, image)
    node.container = c
    progress(ValidateEvent("preflight", f"{c.runtime}: image {image} and its container",
                           node.name))
    shm, shm_source = min_shm(node.plan.host)
    probed = cp.probe_node(
        executor, c, node_python=node.plan.python, run_id=run_id, rank=node.rank,
        timeout=timeout, workdir=node.tmpdir, min_shm=shm, min_shm_source=shm_source)
    node.probed = probed
    if probed.missing:
        raise ImageError(probed.missing, host=node.name)
    if probed.failures:
        raise ImageCheckFailed("; ".join(r.message for r in probed.failures), host=node.name)
    inside = probed.inside
    progress(ValidateEvent("preflight", f"image {probed.digest or '?'}: torch "
                           f"{inside.get('torch')}, CUDA {inside.get('cuda') or '-'}, NCCL "
                           f"{inside.get('nccl') or '-'}, /dev/shm "
                           f"{probed.to_dict()['shm']}", node.name))
    serve = worker_cmd.serve_argv(c.python, worker_cmd.WORKER_NAME, master_addr=master_addr,
                                  free_port=node.rank == 0)
    return ct.run_argv(c, serve, run_id=run_id, rank=node.rank, workdir=node.tmpdir, env=env,
                       gpus=bool(probed.node.get("gpu")),
                       rdma_devices=probed.node.get("rdma") or ())


def probe_answer(node: RunNode, timeout: float, progress: OnValidateEvent) -> NodeProbe:
    """The probe the node's started worker answers, checked; a worker that could not
    answer is named with what it printed.

    Raises:
        LaunchError: no python, no torch, or the worker ended before answering.
        NodeTimeout: no answer within ``timeout``.
    """
    python = node.plan.python
    info = _await_probe(node, timeout, progress)
    fix = (f"set {VAR_PYTHON} for this host to a Python that has torch "
           "(for example /opt/venv/bin/python)")
    if info is None:
        status = ended(node)
        output = "\n".join(node.lines)
        if status in (126, 127):
            raise LaunchError(f"python {python!r} not found or not executable "
                              f"({tail(output)}); " + fix, host=node.name)
        raise LaunchError(f"{python} could not run the worker (exit {status}: "
                          f"{tail(output)}); it needs Python >= 3.8. " + fix, host=node.name)
    if info.get("torch_error"):
        raise LaunchError(f"torch is not importable by {python} ({info['torch_error']}); "
                          f"install torch there or {fix}", host=node.name)
    probe = probe_from(info, host=node.name)
    gpus = f", {probe.cuda_devices} GPU(s)" if probe.cuda_devices else ", no GPU"
    progress(ValidateEvent("preflight", f"python {probe.python}, torch {probe.torch}{gpus}, "
                           f"interfaces {', '.join(probe.interfaces.usable) or '?'}, "
                           f"SSH on {probe.interfaces.ssh or '-'}", node.name))
    return probe


def _await_probe(node: RunNode, timeout: float,
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
                if event["event"] == "launched" and node.container is None:
                    # (in a container, its own pid namespace: the runtime removes it)
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


def _say_swept(node: RunNode, event: dict[str, Any], progress: OnValidateEvent) -> None:
    """Say what the worker removed of earlier runs on this node (by run id)."""
    runs = ", ".join(str(r) for r in event.get("runs") or ())
    dirs = ", ".join(str(d) for d in event.get("dirs") or ())
    what = [f"temp dir(s) {dirs}"] if dirs else []
    if event.get("killed"):
        what.append(f"{event['killed']} process(es)")
    message = f"removed what earlier runs left here: {' and '.join(what) or 'nothing'} (run {runs})"
    log.warning("%s: %s", node.name, message)
    progress(ValidateEvent("preflight", message, node.name))


__all__ = ["Measurement", "OnValidateEvent", "ValidateEvent", "measure", "probe_answer",
           "run_pair", "worker_files"]
