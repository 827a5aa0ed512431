"""Run perftest's ``ib_write_bw`` between a node and a peer, one RDMA port at a time, for
``fabric.rdma_bw[D]`` (``nodetune check --rdma-peer HOST``).

The peer runs the server (``ib_write_bw -d DEV -i PORT -F --report_gbits -D 5 -p TCP``),
the node the client (the same options and the peer's address); with GPUs and
``nvidia_peermem`` on both sides a second run adds ``--use_cuda=0`` (GPU memory to GPU
memory, GPUDirect RDMA). perftest exchanges its connection data over TCP (port
``TCP_PORT``), then measures over the RDMA port. Both commands end by themselves
after ``-D`` seconds; each also runs under coreutils' ``timeout`` (ended at the run's
timeout, whatever happens to this side), and its pid is kept in a file under /tmp so that
a run stopped early (Ctrl-C, a timeout, the other side failing) ends both sides at once:
nothing is left on either node.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.measure import rdma_bw
from nodetune.measure.result import CheckResult, HelpLines, failed, skipped
from nodetune.remote.executor import Command, NodeRunner, Ran

TCP_PORT = 18515  # perftest's default
DURATION_S = 5
NAME = "fabric.rdma_bw"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("fabric.rdma_bw[D]",
     "with --rdma-peer: ib_write_bw per ACTIVE port (and --use_cuda) >= 0.9 x",
     "the port rate (Azure NHC check_ib_bw_gdr: 180 Gb/s on HDR 200)"),
)


# A random name, created with O_EXCL (set -C): a file or link already there stops the run.
PID_DIR = "/tmp"  # noqa: S108
# Runs "$@" (timeout LIMIT ib_write_bw ...) with its pid in file $1 while it runs.
_WRAP = 'f=$1; shift; set -C; "$@" & echo $! > "$f" || { kill $!; exit 125; }; wait $!; ' \
    'rc=$?; rm -f "$f"; exit $rc'
# Ends the run whose pid is in $1 (timeout passes SIGTERM on to ib_write_bw).
_KILL = '[ -f "$1" ] && kill -s TERM "$(cat "$1")" 2>/dev/null; rm -f "$1"; exit 0'


def _argv(device: str, port: str, cuda: bool, tcp_port: int) -> list[str]:
    argv = ["ib_write_bw", "-d", device, "-i", port, "-F", "--report_gbits", "-D",
            str(DURATION_S), "-p", str(tcp_port)]
    return argv + (["--use_cuda=0"] if cuda else [])


def wrapped(argv: list[str], pidfile: str, limit: float) -> list[str]:
    """``argv`` under ``timeout -k 5 LIMIT``, its pid in ``pidfile`` while it runs."""
    return ["sh", "-c", _WRAP, "sh", pidfile, "timeout", "-k", "5",
            str(max(1, math.ceil(limit))), *argv]


def stop(runner: NodeRunner, pidfile: str) -> None:
    """End the run whose pid is in ``pidfile`` on ``runner``'s node (none: nothing)."""
    runner.run(Command(["sh", "-c", _KILL, "sh", pidfile]), timeout=15)


def measure(client: NodeRunner, server: NodeRunner, *, device: str, port: str,
            server_addr: str, cuda: bool, timeout: float,
            tcp_port: int | None = None) -> rdma_bw.BwResult:
    """One ib_write_bw run: the server on ``server``, the client on ``client``.

    The two meet on TCP port ``tcp_port`` (default :data:`TCP_PORT`).

    Raises:
        ValueError: the client printed no result (perftest's reason in the message).
        NodeTimeout: a side did not finish within ``timeout``.
    """
    tcp_port = TCP_PORT if tcp_port is None else tcp_port
    served: list[Ran] = []
    failure: list[BaseException] = []
    token = secrets.token_hex(6)
    pid_server = f"{PID_DIR}/nodetune-ib_write_bw.{token}.server.pid"
    pid_client = f"{PID_DIR}/nodetune-ib_write_bw.{token}.client.pid"

    def serve() -> None:
        try:
            served.append(server.run(Command(wrapped(_argv(device, port, cuda, tcp_port),
                                                     pid_server, timeout)),
                                     timeout=timeout + 10))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    res = None
    done = False
    try:
        for _attempt in range(10):  # the server needs a moment to listen
            time.sleep(0.5)
            res = client.run(Command(wrapped([*_argv(device, port, cuda, tcp_port), server_addr],
                                             pid_client, timeout)), timeout=timeout + 10)
            if "Couldn't connect" not in res.stdout + res.stderr or not thread.is_alive():
                break
        # A server whose client never came (no result table) is ended now, not at the
        # timeout; one whose client measured has its -D seconds and the report to finish.
        measured = res is not None and "BW average" in res.stdout + res.stderr
        thread.join(min(timeout, DURATION_S + 15) if measured else 2)
        done = not thread.is_alive()
    finally:
        # Stopped early (Ctrl-C, a timeout, a lost side): end both sides, again should the
        # server have started only after the first stop.
        for _attempt in range(3 if not done else 0):
            for side, pidfile in ((client, pid_client), (server, pid_server)):
                with contextlib.suppress(Exception):  # the other side still gets its stop
                    stop(side, pidfile)
            thread.join(3)
            if not thread.is_alive():
                break
    if failure:
        raise failure[0]
    assert res is not None
    return rdma_bw.parse(res.stdout + res.stderr, device=device, cuda=cuda)


def judge_with_peer(client: NodeRunner, server: NodeRunner, *, peer: str, peer_addr: str,
                    ports: Sequence[Mapping[str, Any]], cuda: bool,
                    timeout: float) -> list[CheckResult]:
    """``fabric.rdma_bw[D]`` (and ``[D/cuda]``) for every ACTIVE port of the node."""
    active = [p for p in ports if "ACTIVE" in str(p.get("state") or "")]
    if not active:
        return [skipped(NAME, "no ACTIVE RDMA port to measure", source=rdma_bw.SOURCE)]
    out = []
    for p in active:
        device, num = str(p.get("device")), str(p.get("port"))
        rate = rdma_bw.rate_gbps(p.get("rate"))
        for gpu_mem in (False, True) if cuda else (False,):
            try:
                result = measure(client, server, device=device, port=num, server_addr=peer_addr,
                                 cuda=gpu_mem, timeout=timeout)
            except ValueError as exc:
                name = f"{NAME}[{device}{'/cuda' if gpu_mem else ''}]"
                out.append(failed(name, "no result", "a bandwidth", rdma_bw.SOURCE,
                                  f"{device} to {peer}: {exc}"))
                continue
            out.append(rdma_bw.judge(result, rate, peer))
    return out
