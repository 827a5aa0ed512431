"""`nodetune check` end to end: expectations, one probe per node in parallel, judgement.

The library API other verbs call (``validate`` on a fleet checks nodes before
pairing them)::

    results = check_nodes(hosts, CheckOptions())   # {node: NodeChecks}
    verdicts = node_verdicts(results)              # {node: NodeVerdict}
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodetune.ansible.inventory import Host
from nodetune.check import (
    allreduce,
    fabric,
    global_env,
    gpu,
    gpu_read,
    health,
    software,
    timesync,
    versions,
)
from nodetune.check.expect import Expectations, expectations
from nodetune.check.model import CheckResult, NodeChecks, Status, with_error
from nodetune.check.probe import Probe, probe_python, run_probe, torch_only
from nodetune.check.signal_read import Previous
from nodetune.errors import ExitCode, InputError, NodetuneError
from nodetune.measure import node_inputs
from nodetune.measure.host_env import host_env
from nodetune.measure.node_inputs import HealthInputs
from nodetune.records import runs_dir
from nodetune.remote import ssh_executor
from nodetune.remote.executor import NodeRunner
from nodetune.remote.ssh_executor import SshExecutor

# What only --image (validate's container probe) or --rdma-peer (ib_write_bw) uses is
# imported where it runs: the node-local health check runs neither, and pays for every
# import each HealthCheckInterval.
from nodetune.verdicts import NodeState, NodeVerdict, worst_first

if TYPE_CHECKING:  # --sample's module is imported where it runs
    from nodetune.check.sample import Started

log = logging.getLogger(__name__)
TorchReader = Callable[[str, Mapping[str, str]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """How to reach the nodes and how long to wait."""

    timeout: float = 120.0
    accept_new_host_keys: bool = False
    parallel: int = 32
    allreduce: bool = True   # the one-node all_reduce on nodes with >= 2 GPUs
    dcgm_level: int = 1      # dcgmi diag -r LEVEL where DCGM is installed (0: not run)
    rdma_peer: str | None = None  # host that serves ib_write_bw for fabric.rdma_bw
    image: str | None = None      # --image: the container.* checks of this training image
    sample: float | None = None   # --sample: seconds of once-a-second reads (check/sample.py)
    read_ppcc: bool = False       # --read-ppcc: each RoCE port's PPCC register (mlxreg --get)
    # Where torch's versions come from instead of an import on the node (the node-local
    # check's per-boot cache, :mod:`nodetune.check.local_state`): (python, env) -> versions.
    torch_versions: TorchReader | None = None

    def check(self) -> None:
        """Raises InputError on values no run can use."""
        if self.timeout <= 0:
            raise InputError(f"--timeout {self.timeout}: must be > 0 seconds")
        if self.parallel < 1:
            raise InputError(f"--parallel {self.parallel}: must be >= 1")
        if self.dcgm_level not in (0, 1, 2, 3, 4):
            raise InputError(f"--dcgm-level {self.dcgm_level}: choose 1, 2, 3 or 4 (0: skip)")
        if self.image is not None:
            from nodetune.container import runtime as ct

            ct.check_image(self.image)
        if self.sample is not None and not 1 <= self.sample <= 600:
            raise InputError(f"--sample {self.sample:g}: must be between 1 s and 10 min")


Progress = Callable[[str, str], None]  # (node, message)


StateCheck = Callable[[Probe, Expectations, gpu_read.GpuRead], list[CheckResult]]
# The checks of a node's state, in report order: each module's judge_probe gives its results
# from the one probe (its GPUs read once). A new state check is one line here;
# tests/unit/test_check_registry.py holds the list complete.
STATE_CHECKS: tuple[StateCheck, ...] = (
    gpu.judge_probe,          # gpu.count ... gpu.nvlink, gpu.retired_pages
    software.judge_probe,     # software.torch, .cuda, .nccl, .shm
    fabric.judge_probe,       # fabric.rdma, .mtu, .sysctl, .roce, .roce_cc, .nccl
    timesync.judge_probe,     # node.time_sync
    global_env.judge_probe,   # node.global_env
)


def judge(probe: Probe, exp: Expectations, gpus: gpu_read.GpuRead) -> tuple[CheckResult, ...]:
    """Every check of one node from what its probe read (pure: no I/O). ``gpus``: the
    probe's GPUs, :func:`gpu_read.read` of its ``nvidia``, read once by the caller."""
    return tuple(r for check in STATE_CHECKS for r in check(probe, exp, gpus))


def _check_one(host: Host, exp: Expectations, options: CheckOptions,
               progress: Progress, inp: HealthInputs, prev: Previous,
               peer: Host | None = None, env: Mapping[str, str] | None = None) -> NodeChecks:
    t0 = time.monotonic()
    env = env or {}
    executor = None
    results: tuple[CheckResult, ...] = ()
    try:
        progress(host.name, f"connecting to {host.address}")
        executor = ssh_executor.connect(host, accept_new_host_keys=options.accept_new_host_keys,
                                        timeout=min(options.timeout, 30.0))
        node = NodeRunner(executor, host.name)
        if options.dcgm_level > 1:
            progress(host.name, f"dcgmi diag -r {options.dcgm_level} (where DCGM is installed)")
        # Where the all_reduce will run (a quick look sees >= 2 GPUs), its worker's import of
        # torch is the node's only one: the probe leaves torch out.
        seen = _early_gpus(node, exp, options, alone=peer is None or peer.name == host.name)
        read_torch = options.torch_versions
        probe, doc, sampled, window = _reads(node, host, exp, options, inp, env, prev,
                                             progress, torch=seen is None and read_torch is None)
        if read_torch is not None and exp.torch_python is not None:
            probe = dataclasses.replace(probe, torch=read_torch(exp.torch_python, env))
        # the probe's GPUs read once (NVML's document or nvidia-smi -q -x parsed), for the
        # all_reduce, every state check, the health checks and the versions
        gpus = gpu_read.read(probe.nvidia)
        smi = gpus.smi
        early = None
        if seen is not None:
            assert exp.torch_python is not None
            if smi is not None and len(smi.gpus) >= 2:
                progress(host.name, f"all_reduce across its {len(smi.gpus)} GPUs")
                early = allreduce.measure_first(
                    host, smi.gpus[0].product, len(smi.gpus), exp, timeout=options.timeout,
                    accept_new_host_keys=options.accept_new_host_keys)
            torch = allreduce.torch_of(early) if early is not None else None
            probe = dataclasses.replace(probe, torch=torch or torch_only(
                node, exp.torch_python, env=env, timeout=options.timeout))
        results = judge(probe, exp, gpus)
        found, state = health.judge(doc, probe.nvidia, gpus, len(probe.rdma), inp,
                                    exp.kernel_modules, prev)
        results += found + sampled
        if peer is not None and peer.name != host.name:
            progress(host.name, f"ib_write_bw with {peer.name}")
            ports = [p for p in doc.get("rdma_counters") or [] if isinstance(p, dict)]
            results += tuple(_rdma_bw(executor, host, peer, ports, smi is not None and bool(
                doc.get("peermem")), options))
        if smi is not None and len(smi.gpus) >= 2 and options.allreduce and early is None:
            progress(host.name, f"all_reduce across its {len(smi.gpus)} GPUs")
        measured, sizes = allreduce.checks(host, probe, smi, exp, enabled=options.allreduce,
                                           timeout=options.timeout,
                                           accept_new_host_keys=options.accept_new_host_keys,
                                           early=early)
        results += measured
        if options.image is not None:
            progress(host.name, f"image {options.image} and its container")
            results += _image(executor, host, options.image, exp, options)
    except NodetuneError as exc:
        if exc.exit_code == ExitCode.BAD_INPUT:
            raise
        progress(host.name, f"not checked: {exc.message}")
        return with_error(NodeChecks(host.name, duration_s=round(time.monotonic() - t0, 3),
                                     # an image's fault (--image) keeps the node's own checks
                                     results=() if exc.blames_node else results), exc)
    finally:
        if executor is not None:
            executor.close()
    failures = sum(1 for r in results if r.status.value == "fail")
    progress(host.name, f"{len(results)} checks, {failures} failed")
    return NodeChecks(host.name, results, allreduce=sizes, health=state,
                      duration_s=round(time.monotonic() - t0, 3),
                      versions=versions.of(probe, smi), hca_firmware=dict(probe.hca_firmware),
                      window=window)


def _early_gpus(node: NodeRunner, exp: Expectations, options: CheckOptions, *,
                alone: bool) -> tuple[str, int] | None:
    """(model, count) where the all_reduce will run and its worker can read torch for the
    probe: a quick look sees >= 2 GPUs and torch's Python is known; None where the probe
    imports torch itself (no quick answer, fewer GPUs, turned off, or ib_write_bw to run
    with a peer first)."""
    if not options.allreduce or not alone or exp.torch_python is None:
        return None
    try:
        seen = allreduce.seen_gpus(node, timeout=min(options.timeout, 10.0))
    except NodetuneError:  # a hung nvidia-smi: the probe's own reading names it
        return None
    return seen if seen is not None and seen[1] >= 2 else None


def _probe_and_health(node: NodeRunner, host: Host, exp: Expectations,
                      options: CheckOptions, inp: HealthInputs, env: Mapping[str, str], *,
                      torch: bool) -> tuple[Probe, dict[str, Any]]:
    """The probe and the health reader (Xid, fabric, modules, DCGM, RDMA counters) side by
    side; one after the other where DCGM's stress tests run (level >= 2), so that the probe
    reads the GPUs' clocks at rest. The probe's failure is reported before the reader's."""
    def probe() -> Probe:
        return run_probe(node, host, exp, timeout=options.timeout, torch=torch, env=env,
                         ppcc=options.read_ppcc)

    def read() -> dict[str, Any]:
        return health.read_node(node, probe_python(host), host.name, inp,
                                dcgm_level=options.dcgm_level, timeout=options.timeout)

    if options.dcgm_level > 1:
        return probe(), read()
    with ThreadPoolExecutor(max_workers=1) as beside:
        reading = beside.submit(read)
        probed = probe()
        return probed, reading.result()


def _reads(node: NodeRunner, host: Host, exp: Expectations, options: CheckOptions,
           inp: HealthInputs, env: Mapping[str, str], prev: Previous,
           progress: Progress, *, torch: bool
           ) -> tuple[Probe, dict[str, Any], tuple[CheckResult, ...], dict[str, Any]]:
    """The probe, the health reader and --sample's window: (probe, health's answer, the
    sample checks, ``window[NODE]``). The window runs beside the two (all of them only
    read), after them where DCGM's stress tests run, so that it samples the GPUs at rest."""
    sampling = _sampling(node, host, inp, options, progress) \
        if options.dcgm_level <= 1 else None
    probe, doc = _probe_and_health(node, host, exp, options, inp, env, torch=torch)
    if sampling is None:
        sampling = _sampling(node, host, inp, options, progress)
    window: dict[str, Any] = {"previous_check": health.window_of(prev)}
    if sampling is None:
        return probe, doc, (), window
    sampled, window["sample"] = sampling.result()
    return probe, doc, tuple(sampled), window


def _sampling(node: NodeRunner, host: Host, inp: HealthInputs, options: CheckOptions,
              progress: Progress) -> Started | None:
    """--sample's window on the node, started (None without --sample): ``.result()`` waits
    for it and gives (its checks, its ``window[NODE].sample``)."""
    if options.sample is None:
        return None
    from nodetune.check import sample

    progress(host.name, f"sampling {options.sample:g} s")
    return sample.start(node, probe_python(host), host.name, inp, seconds=options.sample,
                        timeout=options.timeout)


def _image(executor: SshExecutor, host: Host, image: str, exp: Expectations,
           options: CheckOptions) -> tuple[CheckResult, ...]:
    """--image: ``container.image`` and the container checklist of ``image`` on the node."""
    from nodetune.container import probe as cp
    from nodetune.container import runtime as ct
    from nodetune.measure.host_env import node_python

    return cp.check_results(
        # The node's NCCL as check and validate read it: through nodetune_python.
        executor, ct.config(host, image), node_python=exp.torch_python or node_python(host),
        timeout=options.timeout, min_shm=exp.min_shm, min_shm_source=exp.min_shm_source)


def _rdma_bw(executor: SshExecutor, host: Host, peer: Host, ports: list[dict[str, Any]],
             cuda: bool, options: CheckOptions) -> list[CheckResult]:
    """fabric.rdma_bw for every ACTIVE port of the node (as the health reader found them
    under ``nodetune_rdma_sysfs``), against ``peer``. ib_write_bw runs on both nodes at
    once (the node's client through ``executor``, the peer's server through an executor of
    its own: :mod:`nodetune.measure.rdma_peer`, which validate shares)."""
    from nodetune.measure import rdma_peer

    server = ssh_executor.connect(peer, accept_new_host_keys=options.accept_new_host_keys,
                                  timeout=min(options.timeout, 30.0))
    try:
        return rdma_peer.judge_with_peer(NodeRunner(executor, host.name),
                                         NodeRunner(server, peer.name), peer=peer.name,
                                         peer_addr=peer.address, ports=ports, cuda=cuda,
                                         timeout=options.timeout)
    finally:
        server.close()


def check_nodes(hosts: Sequence[Host], options: CheckOptions | None = None, *,
                progress: Progress = lambda _n, _m: None,
                previous: Mapping[str, Previous] | None = None
                ) -> dict[str, NodeChecks]:
    """Check every host in parallel; a node that cannot be reached is reported, not raised.

    Every host's expectations are computed before any node is contacted, so bad
    inventory input changes nothing and contacts no one.

    ``previous``: each host's previous check as the caller knows it (a node checking
    itself for ``check --launcher slurm`` gets the controller's); else this machine's
    run history.

    Raises:
        InputError: bad options or inventory variables (names the host and variable).
    """
    options = options or CheckOptions()
    options.check()
    if not hosts:
        raise InputError("no hosts to check")
    exps = {h.name: expectations(h) for h in hosts}
    # torch is read in the environment validate's workers get (nodetune_env), on every path
    envs = {h.name: host_env(h) for h in hosts}
    inps = {h.name: node_inputs.inputs(h) for h in hosts}
    peer = next((h for h in hosts if h.name == options.rdma_peer), None)
    if options.rdma_peer and peer is None:
        raise InputError(f"--rdma-peer {options.rdma_peer}: not one of the hosts checked "
                         f"({', '.join(h.name for h in hosts)})")
    if previous is None:
        history = health.load_history(runs_dir())
        previous = {h.name: health.previous(h.name, history) for h in hosts}
    with ThreadPoolExecutor(max_workers=min(len(hosts), options.parallel)) as pool:
        futures = {h.name: pool.submit(_check_one, h, exps[h.name], options, progress,
                                       inps[h.name], previous.get(h.name, Previous()),
                                       peer, envs[h.name])
                   for h in hosts}
        return {name: f.result() for name, f in futures.items()}


def node_verdicts(results: Mapping[str, NodeChecks]) -> dict[str, NodeVerdict]:
    """One :class:`NodeVerdict` per node: bad on any failed check, unreachable if not probed."""
    return {name: checks.verdict() for name, checks in results.items()}


def report_sections(results: Mapping[str, NodeChecks]) -> dict[str, Any]:
    """``report.json``'s ``checks``, ``nodes`` and ``summary`` sections for these results.

    ``checks[NODE]`` lists every check, failures first; ``nodes[NODE]`` is the
    node's :class:`NodeVerdict` (TEAM.md's shared contract), worst first.
    """
    verdicts = node_verdicts(results)
    ordered = [v.node for v in worst_first(verdicts)]
    counts = {s.value: sum(1 for c in results.values() for r in c.results if r.status is s)
              for s in Status}
    return {
        "checks": {n: results[n].to_list() for n in ordered},
        "allreduce": {n: [dataclasses.asdict(s) for s in results[n].allreduce]
                      for n in ordered if results[n].allreduce},
        "nodes": {n: verdicts[n].to_dict() for n in ordered},
        "health": {n: results[n].health for n in ordered if results[n].health},
        "versions": {n: results[n].versions for n in ordered if results[n].versions},
        "hca_firmware": {n: results[n].hca_firmware for n in ordered
                         if results[n].hca_firmware},
        "window": {n: results[n].window for n in ordered if results[n].window},
        "summary": {"nodes": len(results),
                    "bad": sum(1 for v in verdicts.values() if v.state is NodeState.BAD),
                    "unreachable": sum(1 for v in verdicts.values()
                                       if v.state is NodeState.UNREACHABLE),
                    "not_assessed": sum(1 for v in verdicts.values()
                                        if v.state is NodeState.NOT_ASSESSED),
                    "checks": counts,
                    "duration_s": {n: results[n].duration_s for n in ordered}},
    }


def exit_code(results: Mapping[str, NodeChecks]) -> ExitCode:
    """3 (or 4 for a timeout) when a node could not be checked, else 1 on a failure, else 5
    when a check could not be assessed (a tool hung or crashed), else 0."""
    errors = [c.error_exit_code for c in results.values() if c.error is not None]
    if errors:
        return ExitCode.INFRASTRUCTURE if ExitCode.INFRASTRUCTURE in errors else ExitCode(
            max(e or 3 for e in errors))
    if any(c.failures for c in results.values()):
        return ExitCode.CHECK_FAILED
    if any(c.unknowns for c in results.values()):
        return ExitCode.NOT_ASSESSED
    return ExitCode.OK
