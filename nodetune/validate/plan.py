"""Which two hosts, which sizes, which environment: everything decided before connecting."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodetune.errors import InputError
from nodetune.inventory import Host, Inventory

log = logging.getLogger(__name__)

GROUP = "gpu_nodes"
WORKER_NAME = "nodetune_worker.py"
DEFAULT_SIZES_GPU = "1M:1G"
DEFAULT_SIZES_CPU = "1M:64M"
SIZE_FACTOR = 4
# Inventory variables validate reads (host or group vars).
VAR_PYTHON = "nodetune_python"
VAR_ENV = "nodetune_env"
VAR_CUDA = "nodetune_cuda_visible_devices"
VAR_IFNAME = "nodetune_socket_ifname"
VAR_MASTER = "nodetune_validate_master_addr"
VAR_MIN_BUSBW = "nodetune_validate_min_busbw_gbps"
VAR_PROFILE = "nodetune_validate_profile"
VAR_EXPECT = "nodetune_validate_expect_transport"

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_LOCALHOST = ("localhost", "127.0.0.1", "::1")


def parse_size(text: str) -> int:
    """'64M' -> 67108864 (binary units, as nccl-tests' -b/-e).

    Raises:
        InputError: not a size.
    """
    m = _SIZE.match(text)
    if not m or int(m[1]) <= 0:
        raise InputError(f"size {text!r}: expected a positive number with an optional K, M or "
                         "G suffix (binary: 1M = 1048576 bytes)")
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_sizes(spec: str) -> tuple[int, ...]:
    """Sizes from ``MIN:MAX[:FACTOR]`` (x4 by default, like ``-b MIN -e MAX -f 4``) or ``A,B,C``.

    Sizes are rounded down to whole float32 elements.

    Raises:
        InputError: malformed, MIN > MAX, a factor < 2, or more than 40 sizes.
    """
    spec = spec.strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"--sizes {spec!r}: expected MIN:MAX or MIN:MAX:FACTOR, e.g. 1M:1G")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = int(parts[2]) if len(parts) == 3 else SIZE_FACTOR
        except ValueError:
            raise InputError(
                f"--sizes {spec!r}: factor {parts[2]!r} is not a whole number") from None
        if factor < 2:
            raise InputError(f"--sizes {spec!r}: factor must be >= 2")
        if low > high:
            raise InputError(f"--sizes {spec!r}: MIN is larger than MAX")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= factor
    else:
        sizes = [parse_size(p) for p in spec.split(",") if p.strip()]
        if not sizes:
            raise InputError("--sizes is empty")
    if len(sizes) > 40:
        raise InputError(f"--sizes {spec!r} gives {len(sizes)} sizes; at most 40")
    rounded = sorted({max(4, s - s % 4) for s in sizes})
    return tuple(rounded)


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

    def check(self) -> None:
        """Raises InputError on values no run can use."""
        if self.backend not in ("auto", "nccl", "gloo"):
            raise InputError(f"--backend {self.backend!r}: choose auto, nccl or gloo")
        if self.iters < 1:
            raise InputError(f"--iters {self.iters}: must be >= 1")
        if self.warmup < 0:
            raise InputError(f"--warmup {self.warmup}: must be >= 0")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise InputError(f"--nproc-per-node {self.nproc_per_node}: must be >= 1")
        if self.launch not in ("auto", "graph", "eager"):
            raise InputError(f"--launch {self.launch!r}: choose auto, graph or eager")
        if self.timeout <= 0:
            raise InputError(f"--timeout {self.timeout}: must be > 0 seconds")
        if self.sizes is not None:
            parse_sizes(self.sizes)


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
    """The first two hosts of ``gpu_nodes`` (or of all hosts) in the (limited) inventory.

    Raises:
        InputError: fewer than two hosts.
    """
    candidates = inventory.in_group(GROUP) or inventory.hosts
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
        return override
    var = pair.master.vars.get(VAR_MASTER)
    if var:
        return str(var)
    address = pair.master.address
    if pair.master.connection == "local" and address in (*_LOCALHOST, pair.master.name):
        return "127.0.0.1"
    return address


def node_python(host: Host) -> str:
    """The node's python (``nodetune_python``, default ``python3``)."""
    return str(host.vars.get(VAR_PYTHON) or "python3")


def host_env(host: Host) -> dict[str, str]:
    """Environment for the node's workers from its inventory, before nodetune's additions.

    Raises:
        InputError: ``nodetune_env`` is not a mapping.
    """
    raw = host.vars.get(VAR_ENV) or {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{VAR_ENV} must be a mapping of NAME: value, got {type(raw).__name__}",
                         host=host.name)
    env = {str(k): _env_value(v) for k, v in raw.items()}
    cuda = host.vars.get(VAR_CUDA)
    if cuda not in (None, ""):
        env["CUDA_VISIBLE_DEVICES"] = _env_value(cuda)
    return env


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def worker_env(base: Mapping[str, str], *, backend: str, iface: str | None,
               force_ring: bool) -> dict[str, str]:
    """The full environment a node's ranks get.

    NCCL_DEBUG=INFO on every node (NVIDIA/nccl #876: otherwise half the log is
    missing); the socket interface that reaches the master for gloo and NCCL's
    bootstrap unless the inventory names one (without it gloo may pick an
    address from the hostname and hang).
    """
    env = {"PYTHONUNBUFFERED": "1", "NCCL_DEBUG_SUBSYS": "INIT,NET,TUNING"}
    env.update(base)
    if env.get("NCCL_DEBUG", "INFO").upper() not in ("INFO", "TRACE"):
        log.warning("NCCL_DEBUG=%s from the inventory replaced by INFO: the transport is read "
                    "from NCCL's INFO lines", env["NCCL_DEBUG"])
        env["NCCL_DEBUG"] = "INFO"
    env.setdefault("NCCL_DEBUG", "INFO")
    if iface:
        env.setdefault("GLOO_SOCKET_IFNAME", iface)
        env.setdefault("NCCL_SOCKET_IFNAME", iface)
    if force_ring and backend == "nccl":
        env.setdefault("NCCL_ALGO", "Ring")
    return env


def torchrun_argv(python: str, worker: str, *, node_rank: int, master_addr: str,
                  master_port: int, nproc: int, backend: str, sizes: Sequence[int],
                  iters: int, warmup: int, timeout: float, launch: str = "auto") -> list[str]:
    """argv of ``python -m torch.distributed.run`` with static rendezvous, wrapped in the
    worker's ``launch`` guard (own session, group killed when the controller goes away)."""
    return [
        python, worker, "launch", "--",
        python, "-m", "torch.distributed.run",
        "--nnodes", "2", "--node-rank", str(node_rank),
        "--master-addr", master_addr, "--master-port", str(master_port),
        "--nproc-per-node", str(nproc), "--max-restarts", "0",
        worker, "measure", "--backend", backend,
        "--sizes", ",".join(str(s) for s in sizes),
        "--iters", str(iters), "--warmup", str(warmup), "--timeout", f"{timeout:g}",
        "--launch", launch,
    ]


@dataclass(frozen=True, slots=True)
class NodeProbe:
    """What a node reported before the launch."""

    host: str
    python: str
    torch: str | None
    torch_error: str | None
    cuda_devices: int
    devices: tuple[str, ...]
    iface: str | None
    local_address: str | None
    free_port: int | None
    nccl: str | None = None
    hostname: str = ""
    raw: Mapping[str, object] = field(default_factory=dict, compare=False)


def choose_backend(requested: str, probes: Sequence[NodeProbe]) -> str:
    """``nccl`` when every node has a GPU, ``gloo`` otherwise (for ``auto``)."""
    if requested != "auto":
        return requested
    return "nccl" if all(p.cuda_devices > 0 for p in probes) else "gloo"
