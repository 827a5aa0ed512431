"""The worker's command line (``main``) and its ``serve`` verb, which forks this node's
ranks into that same command line (so the two live together: a rank re-enters ``main``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from nodetune.collective.worker.common import _exitcode, _name_process, emit
from nodetune.collective.worker.guard import launch
from nodetune.collective.worker.measure import measure
from nodetune.collective.worker.probe import probe_info
from nodetune.collective.worker.reaper import GUARD_REMOVE_AFTER_S, reap_cmd, sweep

try:  # on a node: the protocol module uploaded beside the worker (as common does)
    import nodetune_protocol as protocol  # type: ignore[import-not-found]
except ImportError:  # imported or run from the package
    from nodetune.measure import protocol


def serve(args: argparse.Namespace) -> int:
    """Sweep what earlier runs left, probe, then run this node's ranks as the launch spec
    on stdin says."""
    swept = sweep(os.getcwd())
    if swept["runs"]:
        emit("swept", **swept)
    info = probe_info(args)
    emit("probe", **info)
    if "torch_error" in info:
        return 0
    spec = _own_spec()
    if spec is None:  # the controller stopped before the launch
        return 0
    code = run_ranks(spec, fork=bool(info["fork"]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit without interpreter shutdown: unloading torch takes a second, and the
    # controller's cleanup waits for this process group to be gone.
    os._exit(code)


def _own_spec() -> dict[str, Any] | None:
    """This node's launch spec from stdin (None at EOF). Under a Slurm step, srun gives
    every task the same stdin: each spec names its node (``slurm_node``), and a task
    skips the specs of the step's other nodes."""
    me = os.environ.get("SLURMD_NODENAME")
    while True:
        line = sys.stdin.readline()
        if not line.strip():
            return None
        spec: dict[str, Any] = json.loads(line)
        if spec.get("slurm_node") in (None, me):
            return spec


def run_ranks(spec: dict[str, Any], *, fork: bool) -> int:
    """Start ``spec["nproc"]`` ranks of ``measure`` and wait for them, like
    torch.distributed.run with static rendezvous and no restarts: the first rank
    to fail stops the others, and its exit code is this process's."""
    nproc, node_rank, nnodes = int(spec["nproc"]), int(spec["node_rank"]), int(spec["nnodes"])
    for name, value in spec["env"].items():
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            os.environ[name] = str(value)
    os.environ.update({"MASTER_ADDR": str(spec["master_addr"]),
                       "MASTER_PORT": str(spec["port"]),
                       "WORLD_SIZE": str(nnodes * nproc), "LOCAL_WORLD_SIZE": str(nproc),
                       "GROUP_RANK": str(node_rank), "NODE_RANK": str(node_rank)})
    argv = [str(a) for a in spec["argv"]]
    sys.stdout.flush()  # nothing buffered may be written twice by the forks
    sys.stderr.flush()
    ranks: dict[int, int] = {}
    for local in range(nproc):
        rank_env = {"RANK": str(node_rank * nproc + local), "LOCAL_RANK": str(local)}
        if fork:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.environ.update(rank_env)
                    devnull = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(devnull, 0)
                    _name_process(f"nodetune-rank{local}")
                    code = main(argv)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
        else:  # this file: the shipped worker (from the package: this module, a script too)
            pid = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *argv],
                env={**os.environ, **rank_env}, stdin=subprocess.DEVNULL).pid
        ranks[pid] = local
    code = 0
    while ranks:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid not in ranks:
            continue
        local = ranks.pop(pid)
        rc = _exitcode(status)
        if rc != 0 and code == 0:
            sys.stderr.write(rank_failed(local, pid, rc))
            sys.stderr.flush()
            code = rc if rc > 0 else 128 - rc
            _stop(ranks)
    return code


def rank_failed(local: int, pid: int, rc: int) -> str:
    """The line saying a rank failed, in the words torch.distributed.run uses
    (``exitcode : -9`` for SIGKILL), which the controller reads to tell a killed
    rank from its victims."""
    return f"nodetune worker: local rank {local} (pid {pid}) failed: exitcode : {rc}\n"


def _stop(ranks: dict[int, int]) -> None:
    """SIGTERM the ranks still running, SIGKILL them after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while ranks and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                ranks.pop(pid, None)
            else:
                time.sleep(0.05)

def ras_cmd(args: argparse.Namespace) -> int:
    """Ask NCCL's RAS on this node and print what it said as one ``ras`` event (imported
    here: the other verbs never need it)."""
    try:  # on a node: the RAS client uploaded beside this file
        import nodetune_ras as ras  # type: ignore[import-not-found]
    except ImportError:  # imported or run from the package
        from nodetune.collective import ras
    emit("ras", **ras.query(args.addr, args.timeout))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodetune-worker")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--master", default="")
    p.add_argument("--free-port", action="store_true")
    p.set_defaults(fn=serve)
    p = sub.add_parser("launch")
    p.add_argument("--remove-after", type=float, default=GUARD_REMOVE_AFTER_S)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=launch)
    p = sub.add_parser("reap")
    p.add_argument("token")
    p.add_argument("--group", type=int)
    p.add_argument("--remove")
    p.set_defaults(fn=reap_cmd)
    p = sub.add_parser("ras")
    p.add_argument("--addr", default=None)
    p.add_argument("--timeout", type=float, default=15.0)
    p.set_defaults(fn=ras_cmd)
    p = sub.add_parser("measure")
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--launch", choices=("auto", "graph", "eager"), default="auto")
    p.add_argument("--collective", choices=protocol.COLLECTIVES, default="all_reduce")
    p.set_defaults(fn=measure)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
