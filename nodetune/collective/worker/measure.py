"""The ``measure`` verb: one rank's timed loop over the sizes, like nccl-tests'
BenchTime, and what NCCL reads before it starts (the ``nccl_env`` event)."""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from typing import Any

from nodetune.collective.worker.collectives import (
    _buffers,
    _capture,
    _check,
    _op,
    bandwidths,
    elements,
)
from nodetune.collective.worker.common import emit

# Timed rounds per size (each `iters` ops): as many as fit in ROUNDS_S seconds at the
# first round's pace, at most MAX_ROUNDS; the median is reported.
MAX_ROUNDS, ROUNDS_S = 9, 0.1
CONF_MAX = 65536  # bytes of one NCCL config file reported


def nccl_inputs() -> dict[str, object]:
    """What NCCL will read, before it starts: this process's NCCL_* environment and its
    config files in NCCL's order (NCCL_CONF_FILE, or else ~/.nccl.conf; then
    /etc/nccl.conf: NVIDIA/nccl src/misc/param.cc initEnvFunc). Read now because NCCL
    copies the files into the environment when it starts."""
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    paths = []
    if env.get("NCCL_CONF_FILE"):
        paths.append(env["NCCL_CONF_FILE"])
    elif os.environ.get("HOME"):
        paths.append(os.path.join(os.environ["HOME"], ".nccl.conf"))
    paths.append("/etc/nccl.conf")
    files: list[dict[str, object]] = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = fh.read(CONF_MAX).decode("utf-8", "replace")
            files.append({"path": path, "content": text})
        except OSError as exc:
            files.append({"path": path, "content": None, "error": exc.strerror or str(exc)})
    return {"env": env, "files": files}


def measure(args: argparse.Namespace) -> int:
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    node_rank = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
    lead = local_rank == 0
    if lead:
        emit("started", node_rank=node_rank, hostname=socket.gethostname())
    try:
        return _measure(args, rank, local_rank, node_rank)
    except Exception as exc:
        emit("error", rank=rank, node_rank=node_rank, hostname=socket.gethostname(),
             message=f"{type(exc).__name__}: {exc}")
        return 1


def _measure(  # noqa: PLR0915 - one timed loop, kept in one piece to read like BenchTime
        args: argparse.Namespace, rank: int, local_rank: int, node_rank: int) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "nccl" and local_rank == 0:
        emit("nccl_env", **nccl_inputs())
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    t0 = time.perf_counter()
    kwargs: dict[str, object] = {"backend": backend,
                                 "timeout": datetime.timedelta(seconds=args.timeout)}
    if backend == "nccl":
        kwargs["device_id"] = device
    try:
        dist.init_process_group(**kwargs)
    except TypeError:
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)
    world = dist.get_world_size()

    def sync() -> None:
        if backend == "nccl":
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if backend == "nccl":
            dist.barrier(device_ids=[local_rank])
        else:
            dist.barrier()
        sync()

    barrier()
    if rank == 0:
        info: dict[str, object] = {"backend": backend, "world": world,
                                   "init_s": round(time.perf_counter() - t0, 3),
                                   "torch": torch.__version__}
        if backend == "nccl":
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        emit("init", **info)
    if local_rank == 0:
        name = torch.cuda.get_device_name(device) if backend == "nccl" else "cpu"
        emit("node", node_rank=node_rank, hostname=socket.gethostname(), device=name,
             local_world=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))

    elem = 4  # float32, nccl-tests' "float"
    use_graph = backend == "nccl" and args.launch in ("auto", "graph")
    coll = args.collective
    for nbytes in args.sizes:
        count = elements(coll, nbytes // elem, world)
        # The buffers of one size, allocated before timing. Zeros keep their values
        # fixed through back-to-back in-place sums (no growth to inf).
        bufs = _buffers(coll, count, world, torch, device)
        op = _op(coll, bufs, dist)
        graph: Any = None
        if use_graph:
            try:
                graph = _capture(op, args.warmup, args.iters, torch)
            except RuntimeError as exc:
                if args.launch == "graph":
                    raise
                use_graph = False
                if rank == 0:
                    emit("note", message=f"CUDA graph capture failed, timing eager ops: {exc}")
        if graph is None:
            for _ in range(args.warmup):
                op()
        else:
            # One untimed replay first: a graph's first replay pays its upload and first
            # launch, which made the first size of a sweep read low (0.35 of nccl-tests
            # at 1 MiB on H200). The timed replay below is then a warm one, like every
            # other size's. In-place sums of zeros stay zeros, so the data is unchanged.
            graph.replay()
        barrier()
        # nccl-tests' BenchTime: `iters` ops back to back, one wait, host wall time.
        # A size gets as many such rounds as fit in ROUNDS_S at the first round's pace
        # (the slowest rank's, so every rank runs the same number of collectives), at
        # most MAX_ROUNDS, and the median round is the measurement: a round of a small
        # size is a millisecond or less, which a clock tick or a GPU clock change moves
        # by 10 %, while a large size's round is long and steady on its own.
        def timed_round(graph: Any, op: Any) -> float:
            start = time.perf_counter()
            if graph is not None:
                graph.replay()
            else:
                for _ in range(args.iters):
                    op()
            sync()
            return float((time.perf_counter() - start) / args.iters)

        rounds = [timed_round(graph, op)]
        pace = torch.tensor([rounds[0] * args.iters], dtype=torch.float64, device=device)
        dist.all_reduce(pace, op=dist.ReduceOp.MAX)
        wanted = min(MAX_ROUNDS, max(1, math.ceil(ROUNDS_S / max(float(pace.item()), 1e-9))))
        while len(rounds) < wanted:
            rounds.append(timed_round(graph, op))
        # Every rank's rounds, after timing: one small all_gather (every rank runs the
        # same number of rounds), the rows nccl-tests -I gathers as
        # per_process_max_times_us (src/common.cu, GatherProcessMaxIterTimes). The
        # controller derives the per-round statistics and the straggler from them.
        rows = _gather_rounds(rounds, world, dist, torch, device)
        # Mean over ranks, as nccl-tests does by default (each rank's median, fastest
        # and slowest round).
        seconds = sum(statistics.median(r) for r in rows) / world
        fastest = sum(min(r) for r in rows) / world
        slowest = sum(max(r) for r in rows) / world
        wrong = _check(coll, bufs, rank, world, dist)
        if local_rank == 0:
            emit("progress", node_rank=node_rank, bytes=count * elem)
        if rank == 0:
            algbw, busbw = bandwidths(count * elem, seconds, world, coll)
            emit("size", bytes=count * elem, count=count, type="float",
                 time_us=seconds * 1e6, algbw=algbw, busbw=busbw,
                 wrong=wrong, world=world, launch="graph" if graph is not None else "eager",
                 rounds=len(rounds), time_us_min=fastest * 1e6, time_us_max=slowest * 1e6,
                 round_us=[[round(t * 1e6, 3) for t in r] for r in rows])
        del graph, bufs, op
    barrier()
    if rank == 0:
        emit("done", world=world)
    if not _all_left(dist, rank, world):
        dist.destroy_process_group()
    else:
        # Every rank's last kernel is done: exit at once (the process's end frees what NCCL
        # and CUDA hold). Nothing buffered may be lost, and nothing is torn down twice.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _gather_rounds(rounds: list[float], world: int, dist: Any, torch: Any,
                   device: Any) -> list[list[float]]:
    """Every rank's round times (seconds per op), in rank order."""
    mine = torch.tensor(rounds, dtype=torch.float64, device=device)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [[float(x) for x in t.tolist()] for t in out]


def _all_left(dist: Any, rank: int, world: int, *, limit_s: float = 10.0) -> bool:
    """The handshake that lets the ranks skip ``destroy_process_group`` (0.4 s on H200).

    A rank's memory must stay mapped until every peer's last kernel is done: the final
    barrier returns on one rank while a peer's copy of it may still read that rank's
    buffers. Each rank counts itself in on the run's store (the TCP store of
    ``init_process_group``, not NCCL) after its own barrier and GPU sync, and waits for
    all; the store's host (rank 0) waits until every other rank has seen that, so no rank
    is left asking a store that is gone. False: the store could not be used, so the
    caller ends the slow, safe way."""
    try:
        store = dist.distributed_c10d._get_default_store()
        if store.add("nodetune/left", 1) == world:
            store.set("nodetune/all-left", "1")
        store.wait(["nodetune/all-left"])
        if rank != 0:
            store.add("nodetune/seen", 1)
            return True
        deadline = time.monotonic() + limit_s
        while store.add("nodetune/seen", 0) < world - 1:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True
    except Exception:  # an old torch without the store's API: destroy as before
        return False
