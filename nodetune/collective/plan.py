"""Every decision of a validation, in one place: a plan built before connecting
(:func:`plan_pair`) and completed once after the nodes answered the probe
(:meth:`Plan.complete`). :mod:`~nodetune.collective.launch` only carries it out."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodetune.ansible.inventory import Host, Inventory
from nodetune.collective import addresses, datapath, marks
from nodetune.collective.answers import NodeProbe
from nodetune.collective.datapath import DataPath, Request
from nodetune.collective.worker_cmd import measure_argv, worker_env
from nodetune.container import runtime as ct
from nodetune.errors import InputError, LaunchError
from nodetune.measure.host_env import host_env, node_python
from nodetune.measure.protocol import COLLECTIVES
from nodetune.measure.sizes import parse_sizes
from nodetune.measure.thresholds import Threshold

log = logging.getLogger(__name__)

# Under NCCL the ranks' own collective timeout (torch's watchdog, which tears the ranks
# down) outlasts the controller's stall detection (--timeout) by this much, so that a
# stall is seen, and NCCL's RAS asked (ras_ask: SSH answers, ps, 40 s of RAS), while the
# ranks still live; cleanup then ends them.
RANK_TIMEOUT_GRACE_S = 70.0
DEFAULT_SIZES_GPU = "1M:1G"
DEFAULT_SIZES_CPU = "1M:64M"
# Inventory variables validate reads (host or group vars).
VAR_IFNAME = datapath.VAR_IFNAME
VAR_MASTER = addresses.VAR_MASTER
VAR_MIN_BUSBW = marks.VAR_MIN_BUSBW
VAR_PROFILE = marks.VAR_PROFILE
VAR_EXPECT = marks.VAR_EXPECT

_LOCALHOST = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Options:
    """What the user asked for (CLI options, already typed)."""

    backend: str = "auto"
    sizes: str | None = None
    iters: int = 20
    warmup: int = 5
    nproc_per_node: int | None = None
    min_busbw: float | None = None
    profile: str | None = None
    expect_transport: str | None = None
    master_addr: str | None = None
    timeout: float = 120.0
    accept_new_host_keys: bool = False
    launch: str = "auto"
    collective: str = "all_reduce"
    rdma_bw: bool = False      # --rdma-bw: ib_write_bw per ACTIVE RDMA port after all_reduce
    image: str | None = None   # --image: the worker runs inside this container image

    def check(self) -> tuple[int, ...] | None:
        """The message sizes (--sizes parsed; None: the worker's default sweep).

        Raises:
            InputError: a value no run can use.
        """
        if self.backend not in ("auto", "nccl", "gloo"):
            raise InputError(f"--backend {self.backend!r}: choose auto, nccl or gloo")
        if self.iters < 1:
            raise InputError(f"--iters {self.iters}: must be >= 1")
        if self.warmup < 0:
            raise InputError(f"--warmup {self.warmup}: must be >= 0")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise InputError(f"--nproc-per-node {self.nproc_per_node}: must be >= 1")
        if self.collective not in COLLECTIVES:
            raise InputError(f"--collective {self.collective!r}: choose "
                             + ", ".join(COLLECTIVES))
        if self.launch not in ("auto", "graph", "eager"):
            raise InputError(f"--launch {self.launch!r}: choose auto, graph or eager")
        if self.timeout <= 0:
            raise InputError(f"--timeout {self.timeout}: must be > 0 seconds")
        if self.master_addr is not None:
            addresses.checked_address(self.master_addr, "--master-addr")
        if self.image is not None:
            ct.check_image(self.image)
        return parse_sizes(self.sizes) if self.sizes is not None else None


@dataclass(frozen=True, slots=True)
class Pair:
    """The two hosts; ``master`` is node rank 0 and hosts the rendezvous."""

    master: Host
    other: Host
    skipped: tuple[str, ...] = ()

    @property
    def hosts(self) -> tuple[Host, Host]:
        """(node rank 0, node rank 1)."""
        return self.master, self.other


def select_pair(inventory: Inventory) -> Pair:
    """The first two hosts of the inventory's selection (:func:`nodetune.ansible.targets.select`:
    the GPU group under ``--limit``).

    Raises:
        InputError: fewer than two hosts.
    """
    candidates = inventory.hosts
    if len(candidates) < 2:
        where = f" matching --limit {inventory.limit!r}" if inventory.limit else ""
        raise InputError(
            f"validate needs two hosts{where}; found {len(candidates)} "
            f"({', '.join(h.name for h in candidates) or 'none'}) in {inventory.source}; "
            "pass --limit 'node-a,node-b'")
    skipped = tuple(h.name for h in candidates[2:])
    if skipped:
        log.warning("validating %s and %s; not validated: %s (use --limit to choose)",
                    candidates[0].name, candidates[1].name, ", ".join(skipped))
    return Pair(candidates[0], candidates[1], skipped)


def master_address(pair: Pair, override: str | None) -> str:
    """Address node rank 1 dials for the rendezvous: --master-addr, the inventory var, or
    the master's ``ansible_host`` (127.0.0.1 for a local host named localhost)."""
    if override:
        return addresses.checked_address(override, "--master-addr")
    var = pair.master.vars.get(VAR_MASTER)
    if var:
        return addresses.checked_address(str(var), VAR_MASTER, pair.master.name)
    address = pair.master.address
    if pair.master.connection == "local" and address in (*_LOCALHOST, pair.master.name):
        return "127.0.0.1"
    return address


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One node's part, known before connecting: inventory settings only."""

    host: Host
    rank: int
    python: str
    env: Mapping[str, str]          # from the inventory (nodetune_env, CUDA_VISIBLE_DEVICES)
    data: Request                   # the data interface the inventory asks for

    @property
    def name(self) -> str:
        """The inventory name of the host."""
        return self.host.name


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything decided before connecting. Input errors surface here, before any node
    is touched; :meth:`complete` decides the rest from the nodes' probes."""

    pair: Pair                      # one node (check's all_reduce): the host with itself
    nodes: tuple[NodePlan, ...]     # two, or one for an all_reduce inside one node
    master_addr: str
    options: Options                # as given, checked once
    threshold: Threshold | None
    expect_transport: str           # ib | socket | any
    profile: str | None
    force_ring: bool
    sizes: tuple[int, ...] | None   # None: the backend's default, decided after the probe
    notes: tuple[str, ...] = ()     # said with the result (an inventory pass mark not applied)

    def complete(self, probes: Sequence[NodeProbe]) -> Launch:
        """Backend, ranks per node, sizes, port and each node's environment, from the probes.

        Raises:
            LaunchError: the nodes cannot run what was asked (no GPU for nccl, too few
                GPUs, a torch without gloo, no free port on the master).
        """
        by_host = {p.host: p for p in probes}
        ordered = [by_host[n.name] for n in self.nodes]
        backend = choose_backend(self.options.backend, ordered)
        nproc = ranks_per_node(backend, self.options.nproc_per_node, ordered)
        port = ordered[0].free_port
        if port is None:
            raise LaunchError("could not pick a free port on the master node",
                              host=self.nodes[0].name)
        sizes = self.sizes or parse_sizes(
            DEFAULT_SIZES_GPU if backend == "nccl" else DEFAULT_SIZES_CPU)
        env = {}
        paths = []
        for node, probe in zip(self.nodes, ordered, strict=True):
            path = datapath.resolve(node.name, node.data, probe.interfaces)
            if path.interface is None:
                log.warning("%s: could not tell which interface reaches the master; set %s",
                            node.name, VAR_IFNAME)
            paths.append(path)
            env[node.name] = worker_env(node.env, backend=backend, iface=path.interface,
                                        force_ring=self.force_ring)
        return Launch(plan=self, backend=backend, nproc_per_node=nproc, sizes=sizes, port=port,
                      env=env, paths=tuple(paths))


@dataclass(frozen=True, slots=True)
class Launch:
    """The completed plan: what is started on each node."""

    plan: Plan
    backend: str
    nproc_per_node: int
    sizes: tuple[int, ...]
    port: int
    env: Mapping[str, Mapping[str, str]]   # per host, without the run's id
    paths: tuple[DataPath, ...] = ()       # each node's data interface, in node order

    @property
    def rank_timeout(self) -> float:
        """The ranks' own timeout: --timeout, plus RANK_TIMEOUT_GRACE_S under NCCL."""
        grace = RANK_TIMEOUT_GRACE_S if self.backend == "nccl" else 0.0
        return self.plan.options.timeout + grace

    def spec(self, node: NodePlan) -> dict[str, object]:
        """What the node's ``serve`` reads on stdin: its ranks, the rendezvous, their
        environment and the ``measure`` arguments (JSON: no shell, no quoting)."""
        o = self.plan.options
        return {"nproc": self.nproc_per_node, "node_rank": node.rank,
                "nnodes": len(self.plan.nodes), "master_addr": self.plan.master_addr,
                "port": self.port, "env": dict(self.env[node.name]),
                "argv": measure_argv(backend=self.backend, sizes=self.sizes, iters=o.iters,
                                     warmup=o.warmup, timeout=self.rank_timeout, launch=o.launch,
                                     collective=o.collective)}


def plan_pair(pair: Pair, options: Options) -> Plan:
    """Check the options and the pair's inventory settings; decide all that can be decided
    before connecting.

    Raises:
        InputError: a bad option or inventory variable (exit 2), naming the host or variable.
    """
    sizes = options.check()
    master_addr = master_address(pair, options.master_addr)
    mark = marks.pass_mark(pair.hosts, asked(options))
    nodes = tuple(
        NodePlan(host=h, rank=rank, python=node_python(h), env=host_env(h),
                 data=datapath.request_for(h.name, h.vars))
        for rank, h in enumerate(pair.hosts))
    return Plan(
        pair=pair, nodes=(nodes[0], nodes[1]), master_addr=master_addr,
        options=options, threshold=mark.threshold, expect_transport=mark.expect,
        profile=mark.profile, force_ring=mark.force_ring, sizes=sizes, notes=mark.notes)


def asked(options: Options) -> marks.Asked:
    """What ``options`` ask of a test's pass mark."""
    return marks.Asked(min_busbw=options.min_busbw, profile=options.profile,
                       expect_transport=options.expect_transport,
                       collective=options.collective)


def plan_node(host: Host, options: Options) -> Plan:
    """A plan for an all_reduce across one host's own GPUs (``nodetune check``): one node,
    rendezvous on its loopback, no threshold or transport expectation (the caller judges).

    Raises:
        InputError: a bad option or inventory variable (exit 2).
    """
    sizes = options.check()
    node = NodePlan(host=host, rank=0, python=node_python(host), env=host_env(host),
                    data=Request("one node: its loopback", exact=("lo",)))
    return Plan(pair=Pair(host, host), nodes=(node,), master_addr="127.0.0.1", options=options,
                threshold=None, expect_transport="any", profile=None, force_ring=False,
                sizes=sizes)


def choose_backend(requested: str, probes: Sequence[NodeProbe]) -> str:
    """``nccl`` when every node has a GPU, ``gloo`` otherwise (for ``auto``)."""
    if requested != "auto":
        return requested
    return "nccl" if all(p.cuda_devices > 0 for p in probes) else "gloo"


def ranks_per_node(backend: str, requested: int | None, probes: Sequence[NodeProbe]) -> int:
    """Ranks per node: as asked, or one per GPU (one on CPU).

    Raises:
        LaunchError: the nodes cannot run that many ranks with that backend.
    """
    if backend == "gloo":
        for p in probes:
            if p.raw.get("gloo") is False:
                raise LaunchError(f"torch {p.torch} on this node was built without gloo",
                                  host=p.host)
        return requested or 1
    for p in probes:
        if p.cuda_devices == 0:
            raise LaunchError(
                f"--backend nccl but torch {p.torch} sees no CUDA device (CUDA_VISIBLE_DEVICES, "
                "driver, or a CPU-only torch build); use --backend gloo for CPU nodes",
                host=p.host)
    gpus = min(p.cuda_devices for p in probes)
    if requested and requested > gpus:
        worst = min(probes, key=lambda p: p.cuda_devices)
        raise LaunchError(f"--nproc-per-node {requested} but only "
                          f"{worst.cuda_devices} GPU(s) are visible", host=worst.host)
    return requested or gpus

