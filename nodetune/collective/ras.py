"""Ask NCCL's RAS thread which ranks of its communicators are missing, dead or in error.

NCCL >= 2.24 runs a RAS thread in every process that listens on ``NCCL_RAS_ADDR``
(default ``localhost:28028``) and answers a line-based text protocol; from 2.28.7 it
can answer in JSON. This module is the bounded client the worker runs on a node when
a timed NCCL phase stalls; it is stdlib only and Python 3.8-compatible (it runs
``python -S`` on the node) and never raises: every failure becomes a ``reason``.

The protocol, as NCCL's sources define it (github.com/NVIDIA/nccl, read 2026-11-29,
commit 5067397, src/ras/client_support.cc ``rasClientEventLoop`` and ``jsonWrite*``,
src/ras/client.cc, src/ras/ras_internal.h, docs/userguide/source/troubleshooting/ras.rst):

  client: ``CLIENT PROTOCOL 2``  server: ``SERVER PROTOCOL 2``
  client: ``TIMEOUT <s>``        server: ``OK``  (per collective leg among the RAS peers)
  client: ``SET FORMAT json``    server: ``OK``  (2.24.3 to 2.28.3, tags v2.24.3-1 and
                                 v2.28.3-1: ``ERROR: Unknown command set format json``)
  client: ``STATUS``             server: the report, then it closes the connection

A real conversation with NCCL 2.28.9 is in tests/fixtures/nccl/ras_2_28_9.txt.

  python -S -m nodetune.collective.ras [--addr HOST:PORT] [--timeout S] [--verbose]

prints the parsed result as JSON; exit 0 when RAS answered with a status, 3 when it
could not be asked, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from typing import Any

DEFAULT_ADDR = "localhost:28028"  # NCCL_RAS_CLIENT_PORT, src/ras/ras_internal.h
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL
MAX_REPLY = 8 << 20  # bytes of one status read; RAS's JSON is ~1 KiB per rank
NOT_RUNNING = "RAS not running (NCCL < 2.24 or NCCL_RAS_ENABLE=0)"
TOO_OLD = "RAS too old for JSON (NCCL < 2.28.7: SET FORMAT refused)"
# init_state: ncclSuccess (0) when initialised, ncclInProgress (7) while initialising.
_INIT_OK = (0, 7)
# socket.timeout: an alias of TimeoutError from Python 3.10, a subclass of OSError before.
_TIMEOUT = (socket.timeout, TimeoutError)


class _Failed(Exception):
    """A reason the status could not be had (never escapes :func:`query`). ``busy``: RAS
    gave no answer in time, as while its thread is busy with a collection: worth asking
    again (:data:`ATTEMPT_S`); any other failure is RAS's answer and stands."""

    def __init__(self, reason: str, *, busy: bool = False) -> None:
        super().__init__(reason)
        self.busy = busy


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as NCCL_RAS_ADDR gives it.

    Raises:
        ValueError: not HOST:PORT with a port in 1..65535.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"RAS address {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def default_addr() -> str:
    """Where this node's NCCL processes listen: NCCL_RAS_ADDR, else localhost:28028."""
    return os.environ.get("NCCL_RAS_ADDR") or DEFAULT_ADDR


def _line(sock: socket.socket, buf: bytearray, deadline: float) -> str:
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Failed("RAS did not answer the handshake in time", busy=True)
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except _TIMEOUT:
            raise _Failed("RAS did not answer the handshake in time", busy=True) from None
        if not chunk:
            raise _Failed("RAS closed the connection during the handshake")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode("utf-8", "replace").strip()


def _ask(sock: socket.socket, buf: bytearray, cmd: str, deadline: float) -> str:
    sock.sendall(cmd.encode() + b"\n")
    return _line(sock, buf, deadline)


def _read_all(sock: socket.socket, buf: bytearray, deadline: float) -> bytes:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Failed(f"RAS sent {len(buf)} bytes of its status and did not finish in time",
                          busy=True)
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except _TIMEOUT:
            raise _Failed(f"RAS sent {len(buf)} bytes of its status and did not finish "
                          "in time", busy=True) from None
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > MAX_REPLY:
            raise _Failed(f"RAS's status is over {MAX_REPLY} bytes")


def _converse(host: str, port: int, timeout: float, verbose: bool) -> bytes:
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=max(0.1, timeout))
    except ConnectionRefusedError:
        raise _Failed(NOT_RUNNING) from None
    except _TIMEOUT:
        raise _Failed(f"no answer connecting to RAS within {timeout:g} s", busy=True) from None
    except OSError as exc:
        raise _Failed(f"cannot connect to RAS: {exc.strerror or exc}") from None
    with sock:
        buf = bytearray()
        hello = _ask(sock, buf, f"CLIENT PROTOCOL {PROTOCOL}", deadline)
        if not hello.upper().startswith("SERVER PROTOCOL"):
            raise _Failed(f"not NCCL's RAS: it answered {hello[:80]!r}")
        # TIMEOUT bounds each leg of RAS's gathering among its peers; leave room for two.
        leg = max(1, int(timeout / 3))
        answer = _ask(sock, buf, f"TIMEOUT {leg}", deadline)
        if answer != "OK":
            raise _Failed(f"RAS refused TIMEOUT {leg}: {answer[:80]!r}")
        answer = _ask(sock, buf, "SET FORMAT json", deadline)
        if answer != "OK":
            raise _Failed(TOO_OLD)
        sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
        return _read_all(sock, buf, deadline)


# One conversation's bound, retried within the caller's total. While a peer does not
# answer it, RAS's thread stays busy with a collection for seconds at a time and skips
# handshakes meanwhile: on 2x H200 (NCCL 2.28.9, one rank's process stopped,
# benchmarks/ras_on_gpu.py --poll-s) about every other 4 s ask got a status, and a
# single 40 s ask none. Short asks, retried, get the first status RAS gives.
ATTEMPT_S = 6.0


def _once(where: str, timeout: float, verbose: bool) -> tuple[dict[str, Any], bool]:
    """One ask: its result, and whether RAS was too busy to answer (:class:`_Failed`)."""
    try:
        host, port = parse_addr(where)
        data = _converse(host, port, timeout, verbose)
    except ValueError as exc:
        return {"ok": False, "addr": where, "reason": str(exc)}, False
    except _Failed as exc:
        return {"ok": False, "addr": where, "reason": str(exc)}, exc.busy
    except OSError as exc:  # reset mid-conversation, or a send to a closed peer
        return {"ok": False, "addr": where,
                "reason": f"RAS connection failed: {exc.strerror or exc}"}, False
    try:
        out = parse_status(data.decode("utf-8", "replace"))
    except Exception as exc:  # an odd shape: a reason, never a traceback
        return {"ok": False, "addr": where,
                "reason": f"RAS's status has an unexpected shape ({type(exc).__name__})"}, False
    out["addr"] = where
    return out, False


def query(addr: str | None = None, timeout: float = 10.0, verbose: bool = False) -> dict[str, Any]:
    """Ask RAS at ``addr`` for its JSON status, within ``timeout`` seconds in all: asks of
    at most :data:`ATTEMPT_S` each, again while RAS is too busy to answer and time is
    left.

    Returns :func:`parse_status`'s result with ``addr`` and ``attempts``; where RAS could
    not be asked or its answer not read, ``{"ok": False, "addr": ..., "reason": ...}``.
    Never raises.
    """
    where = addr or default_addr()
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        left = deadline - time.monotonic()
        attempts += 1
        out, busy = _once(where, min(left, ATTEMPT_S), verbose)
        if not busy or deadline - time.monotonic() < 1.0:
            out["attempts"] = attempts
            return out


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _who(rank: dict[str, Any]) -> dict[str, Any]:
    return {"rank": _int(rank.get("rank")), "host": str(rank.get("host", "")),
            "pid": _int(rank.get("pid")), "cuda_dev": _int(rank.get("cuda_dev")),
            "nvml_dev": _int(rank.get("nvml_dev"))}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _communicator(comm: dict[str, Any]) -> dict[str, Any]:
    missing, errors = [], []
    for rank in _list(comm.get("missing_ranks")):
        if not isinstance(rank, dict):
            continue
        status = _dict(rank.get("status"))
        who = _who(rank)
        who["unresponsive"] = status.get("unresponsive") is True
        who["dead"] = status.get("considered_dead") is True
        missing.append(who)
    for rank in _list(comm.get("ranks")):
        if not isinstance(rank, dict):
            continue
        status = _dict(rank.get("status"))
        async_error, init_state = _int(status.get("async_error")), _int(status.get("init_state"))
        if async_error or (init_state is not None and init_state not in _INIT_OK) \
                or status.get("abort_flag") is True:
            who = _who(rank)
            who.update(async_error=async_error, init_state=init_state,
                       abort=status.get("abort_flag") is True)
            errors.append(who)
    return {"hash": str(comm.get("hash", "")), "size": _int(comm.get("size")),
            "ranks_count": _int(comm.get("ranks_count")),
            "missing_ranks_count": _int(comm.get("missing_ranks_count")),
            "missing": missing, "errors": errors, "behind": _behind(_list(comm.get("ranks")))}


def _behind(ranks: list[Any]) -> list[dict[str, Any]]:
    """The ranks that launched fewer operations of a kind than another rank did (RAS's
    ``collective_counts``, per operation since NCCL 2.26; the text report's MISMATCH).
    While collectives run this is often momentary; in a stall it names who is stuck
    before the collective the others wait in."""
    counts = []
    for rank in ranks:
        if isinstance(rank, dict):
            ops = _dict(rank.get("collective_counts"))
            counts.append((rank, {k: v for k, v in ops.items() if _int(v) is not None}))
    top: dict[str, int] = {}
    for _rank, ops in counts:
        for op, n in ops.items():
            top[op] = max(top.get(op, n), n)
    out = []
    for rank, ops in counts:
        short = {op: [n, top[op]] for op, n in sorted(ops.items()) if n < top[op]}
        if short:
            who = _who(rank)
            who["ops"] = short
            out.append(who)
    return out


# NCCL 2.28.7-2.28.9 write a missing rank's "nvml_dev" without the comma before its
# "status" (src/ras/client_support.cc jsonWriteMissingRank: ``"nvml_dev": %d\n``; v2.29.2-1
# writes ``%d,\n``; NVIDIA/nccl tags read 2026-11-29): the JSON of exactly the status that
# names a missing rank does not parse. A value at a line's end followed by a line that
# starts a key is that defect; the comma is put back only where the text did not parse.
_MISSING_COMMA = re.compile(r'([0-9"el\]}])([ \t]*\n[ \t]*"[A-Za-z_]+"[ \t]*:)')


def _load(text: str) -> tuple[Any, str]:
    """The status document, and a note where NCCL's missing comma was put back.

    Raises:
        ValueError: the text is not JSON even with the comma back (cut off, not RAS's).
    """
    try:
        return json.loads(text), ""
    except ValueError:
        fixed = _MISSING_COMMA.sub(r"\1,\2", text)
        if fixed == text:
            raise
        return json.loads(fixed), ("read with the comma NCCL 2.28.7-2.28.9 leave out of a "
                                   "missing rank's entry put back")


def parse_status(text: str) -> dict[str, Any]:
    """The small result of one RAS JSON status: per communicator its missing ranks (with
    node, PID, GPU, unresponsive/dead), its ranks in error (async error, failed init,
    abort) and the ranks behind the others in launched operations. ``ok`` False with a
    ``reason`` for anything that is not a whole status.
    """
    if not text.strip():
        return {"ok": False, "reason": "RAS closed the connection without a status"}
    try:
        doc, note = _load(text)
    except ValueError as exc:
        return {"ok": False, "reason": f"RAS's status is cut off or not JSON "
                f"({len(text)} bytes: {exc})"}
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        return {"ok": False, "reason": "RAS's status has no communicators list"}
    comms = [_communicator(c) for c in doc["communicators"] if isinstance(c, dict)]
    ras = _dict(doc.get("ras"))
    healthy = not any(c["missing"] or c["errors"] or c["missing_ranks_count"] for c in comms)
    return {"ok": True, "nccl_version": str(doc.get("nccl_version", "")),
            "timestamp": str(doc.get("timestamp", "")), "healthy": healthy,
            "communicators": comms, "timeouts_count": _int(ras.get("timeouts_count")),
            **({"note": note} if note else {})}


def _rank_text(r: dict[str, Any]) -> str:
    """``rank 1 (pid 735 on 10.1.1.2 GPU 1)``: the GPU as nvidia-smi numbers it (NVML's
    index), with the CUDA device where CUDA_VISIBLE_DEVICES numbers it otherwise."""
    nvml, cuda = r.get("nvml_dev"), r.get("cuda_dev")
    index = nvml if nvml is not None else cuda
    gpu = f" GPU {index}" if index is not None else ""
    if nvml is not None and cuda is not None and cuda != nvml:
        gpu += f", CUDA device {cuda}"
    return f"rank {r.get('rank')} (pid {r.get('pid')} on {r.get('host') or '?'}{gpu})"


def summary(result: dict[str, Any]) -> str:
    """One line for a failure message: what RAS named, or why it could not be asked."""
    if not result.get("ok"):
        return f"NCCL RAS: {result.get('reason')}"
    parts = []
    for comm in result.get("communicators") or []:
        for r in comm["missing"]:
            state = "dead" if r["dead"] else "unresponsive" if r["unresponsive"] else "missing"
            parts.append(f"{state} {_rank_text(r)}")
        unnamed = (comm.get("missing_ranks_count") or 0) - len(comm["missing"])
        if unnamed > 0:
            parts.append(f"{unnamed} missing rank(s) RAS did not name")
        for r in comm["errors"]:
            what = f"async error {r['async_error']}" if r.get("async_error") else (
                "aborted" if r.get("abort") else f"init state {r.get('init_state')}")
            parts.append(f"{what} on {_rank_text(r)}")
    behind = [f"{_rank_text(r)} behind on " + ", ".join(
        f"{op} ({n} of {top})" for op, (n, top) in sorted(r["ops"].items()))
        for comm in result.get("communicators") or [] for r in comm.get("behind") or []]
    if not parts:
        n = len(result.get("communicators") or [])
        parts = [f"{n} communicator(s), every rank answered, no async error"]
    return "NCCL RAS: " + "; ".join(parts + behind)


def dead_hosts(result: dict[str, Any]) -> list[str]:
    """The nodes (RAS's addresses) of ranks RAS considers dead."""
    hosts = {r["host"] for c in result.get("communicators") or [] for r in c["missing"]
             if r.get("dead") and r.get("host")}
    return sorted(hosts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -S -m nodetune.collective.ras",
                                description="Ask NCCL's RAS for its communicators' status.")
    p.add_argument("--addr", default=None, help=f"HOST:PORT (NCCL_RAS_ADDR, else {DEFAULT_ADDR})")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds in all (default 10)")
    p.add_argument("--verbose", action="store_true", help="ask VERBOSE STATUS")
    args = p.parse_args(argv)
    if args.addr is not None:
        try:
            parse_addr(args.addr)
        except ValueError as exc:
            sys.stderr.write(f"--addr: {exc}\n")
            return 2
    if not 0 < args.timeout <= 600:
        sys.stderr.write(f"--timeout: {args.timeout:g} is not in (0, 600] seconds\n")
        return 2
    result = query(args.addr, args.timeout, args.verbose)
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0 if result.get("ok") else 3


if __name__ == "__main__":
    sys.exit(main())
