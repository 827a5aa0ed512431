"""How a node's worker is started and what its ranks get: the files staged beside it, its
argv (``serve`` under its ``launch`` guard, then each rank's ``measure``) and the ranks'
environment (NCCL's log kept readable)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)

WORKER_NAME = "nodetune_worker.py"
PROTOCOL_NAME = "nodetune_protocol.py"  # beside the worker, which imports it
RAS_NAME = "nodetune_ras.py"  # beside the worker: its NCCL RAS client (``ras`` verb)
DEBUG_SUBSYS = "INIT,NET,TUNING,ENV"
# What the run reads from NCCL's log: the transport (INIT, NET), the algorithm (TUNING), the
# values NCCL used (ENV: nccl_effective.py). ENV adds one line per setting NCCL reads.
_NEEDED_SUBSYS = ("INIT", "ENV")


def debug_subsys(value: str) -> str:
    """``NCCL_DEBUG_SUBSYS`` as given with INIT and ENV kept in: added to a list, removed
    from a ``^`` list (which names the subsystems left out: NVIDIA/nccl src/debug.cc)."""
    text = value.strip()
    if text.startswith("^"):
        kept = [s for s in text[1:].split(",") if s and s.upper() not in _NEEDED_SUBSYS]
        return "^" + ",".join(kept) if kept else "ALL"
    names = [s for s in text.split(",") if s]
    if any(s.upper() == "ALL" for s in names):
        return text
    return ",".join(names + [s for s in _NEEDED_SUBSYS
                             if s not in {n.upper() for n in names}])


def worker_env(base: Mapping[str, str], *, backend: str, iface: str | None,
               force_ring: bool) -> dict[str, str]:
    """The full environment a node's ranks get.

    NCCL_DEBUG=INFO on every node (NVIDIA/nccl #876: otherwise half the log is
    missing), with INIT and ENV among the subsystems (:func:`debug_subsys`); ``iface``,
    the data interface :mod:`~nodetune.collective.datapath`
    decided, for gloo (without it gloo may pick an address from the hostname and
    hang) and for NCCL's sockets unless ``nodetune_env`` gives NCCL its own list.
    """
    env = {"PYTHONUNBUFFERED": "1", "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYS}
    env.update(base)
    env["NCCL_DEBUG_SUBSYS"] = debug_subsys(env["NCCL_DEBUG_SUBSYS"])
    if env.get("NCCL_DEBUG", "INFO").upper() not in ("INFO", "TRACE"):
        log.warning("NCCL_DEBUG=%s from the inventory replaced by INFO: the transport is read "
                    "from NCCL's INFO lines", env["NCCL_DEBUG"])
        env["NCCL_DEBUG"] = "INFO"
    env.setdefault("NCCL_DEBUG", "INFO")
    if iface:
        env["GLOO_SOCKET_IFNAME"] = iface   # the decision already weighed nodetune_env's
        env.setdefault("NCCL_SOCKET_IFNAME", iface)
    if force_ring and backend == "nccl":
        env.setdefault("NCCL_ALGO", "Ring")
    return env


def serve_argv(python: str, worker: str, *, master_addr: str, free_port: bool) -> list[str]:
    """argv of the node's worker: ``serve`` (probe, then the ranks) under its ``launch`` guard
    (own session, group killed when the controller goes away)."""
    argv = [python, worker, "launch", "--", python, worker, "serve", "--master", master_addr]
    return [*argv, "--free-port"] if free_port else argv


def measure_argv(*, backend: str, sizes: Sequence[int], iters: int, warmup: int,
                 timeout: float, launch: str = "auto", collective: str = "all_reduce") -> list[str]:
    """The ``measure`` arguments every rank runs with."""
    return ["measure", "--backend", backend, "--sizes", ",".join(str(s) for s in sizes),
            "--iters", str(iters), "--warmup", str(warmup), "--timeout", f"{timeout:g}",
            "--launch", launch, "--collective", collective]
