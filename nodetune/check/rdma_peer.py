"""Run perftest's ``ib_write_bw`` between a node and a peer, one RDMA port at a time, for
``fabric.rdma_bw[D]`` (``nodetune check --rdma-peer HOST``).

The peer runs the server (``ib_write_bw -d DEV -i PORT -F --report_gbits -D 5 -p TCP``),
the node the client (the same options and the peer's address); with GPUs and
``nvidia_peermem`` on both sides a second run adds ``--use_cuda=0`` (GPU memory to GPU
memory, GPUDirect RDMA). perftest exchanges its connection data over TCP (port
``TCP_PORT``), then measures over the RDMA port. Both commands end by themselves
after ``-D`` seconds; nothing is left on either node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.check import rdma_bw
from nodetune.check.model import CheckResult, failed, skipped
from nodetune.remote import ssh

TCP_PORT = 18515  # perftest's default
DURATION_S = 5
NAME = "fabric.rdma_bw"


def _argv(device: str, port: str, cuda: bool, tcp_port: int) -> list[str]:
    argv = ["ib_write_bw", "-d", device, "-i", port, "-F", "--report_gbits", "-D",
            str(DURATION_S), "-p", str(tcp_port)]
    return argv + (["--use_cuda=0"] if cuda else [])


def measure(client: ssh.Session, server: ssh.Session, *, device: str, port: str,
            server_addr: str, cuda: bool, timeout: float,
            tcp_port: int = TCP_PORT) -> rdma_bw.BwResult:
    """One ib_write_bw run: the server on ``server``, the client on ``client``.

    Raises:
        ValueError: the client printed no result (perftest's reason in the message).
        NodeTimeout: a side did not finish within ``timeout``.
    """
    served: list[ssh.CommandResult] = []
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            served.append(server.run(_argv(device, port, cuda, tcp_port), timeout=timeout))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    res = None
    for _attempt in range(10):  # the server needs a moment to listen
        time.sleep(0.5)
        res = client.run([*_argv(device, port, cuda, tcp_port), server_addr], timeout=timeout)
        if "Couldn't connect" not in res.stdout + res.stderr or not thread.is_alive():
            break
    thread.join(timeout)
    if failure:
        raise failure[0]
    assert res is not None
    return rdma_bw.parse(res.stdout + res.stderr, device=device, cuda=cuda)


def judge_with_peer(client: ssh.Session, server: ssh.Session, *, peer: str, peer_addr: str,
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
