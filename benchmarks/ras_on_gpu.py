#!/usr/bin/env python3
"""NCCL's RAS on a real communicator, and a hung rank named by `validate`, on one machine
with two GPUs.

1. **The client against real NCCL.** Two ranks (one per GPU, torch.distributed over
   NCCL) run one all_reduce; then rank 1 stops calling collectives while rank 0 starts
   another. ``python -S -m nodetune.collective.ras`` is asked twice: while rank 1 is merely
   behind, then 10 s and ``--stopped-s`` seconds after one rank is stopped (SIGSTOP): the
   rank that does not hold RAS's listening socket (the node's first NCCL process to bind
   NCCL_RAS_ADDR holds it, and a stopped process answers nothing). Each answer is printed
   and kept under --out.
2. **validate names the hung rank.** Two inventory hosts with ``ansible_connection:
   local`` stand for two nodes, one GPU each (as benchmarks/validate_vs_nccl_tests.py).
   While validate measures, the rank that does not hold RAS's listening socket is
   stopped (SIGSTOP); validate's --timeout sees the stall, asks RAS on rank 0's node
   before cleanup and must name the stopped rank. The JSON document and stderr are kept.

  python3 benchmarks/ras_on_gpu.py [--out DIR] [--stopped-s 75]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_vs_nccl_tests import SAFE_ENV, inventory

REPO = Path(__file__).resolve().parents[1]
RANKS = textwrap.dedent('''
    import os, sys, time, torch, torch.distributed as dist
    rank = int(sys.argv[1])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK=str(rank),
                      WORLD_SIZE="2")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t); torch.cuda.synchronize()
    print(f"rank {rank} pid {os.getpid()} joined", flush=True)
    if rank == 0:
        dist.all_reduce(t)  # rank 1 never joins: this waits
        torch.cuda.synchronize()
    time.sleep(600)
''')


def ask(label: str, out: Path, timeout: float = 10.0) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-S", "-m", "nodetune.collective.ras", "--timeout",
                           str(timeout)], capture_output=True, text=True, cwd=REPO,
                          check=False)
    (out / f"ras-{label}.json").write_text(proc.stdout)
    # RAS's own words, for the fixtures: the same conversation, its answer kept whole
    sys.path.insert(0, str(REPO))
    from nodetune.collective import ras
    try:
        raw = ras._converse("127.0.0.1", 28028, timeout, False)
        print(f"-- raw answer ({len(raw)} bytes):\n{raw.decode('utf-8', 'replace')}")
    except Exception as exc:
        print(f"-- raw answer: none ({exc})")
    print(f"== RAS {label}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-500:]}")
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        return {}
    return doc


def listener_pid(port: int = 28028) -> int | None:
    """The process holding RAS's listening socket: the first NCCL process on the node to
    bind NCCL_RAS_ADDR (the others find it taken). Read from /proc/net/tcp (LISTEN is
    state 0A) and each process's socket fds."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[1].endswith(f":{port:04X}") and f[3] == "0A":
                inodes.add(f"socket:[{f[9]}]")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in inodes:
                    return int(entry)
            except OSError:
                continue
    return None


def poll(seconds: float, every: float = 5.0, timeout: float = 4.0) -> None:
    """Ask RAS every ``every`` seconds for ``seconds``: when it answers while a peer is
    stopped (one line per ask: seconds since the stop, answered or why not)."""
    sys.path.insert(0, str(REPO))
    from nodetune.collective import ras
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t = time.monotonic() - start
        got = ras.query(None, timeout=timeout)
        said = ras.summary(got) if got.get("ok") else got.get("reason")
        print(f"  +{t:5.1f} s: {'answered' if got.get('ok') else 'no status'}: {said}",
              flush=True)
        time.sleep(max(0.0, every - (time.monotonic() - start - t)))


def client(out: Path, stopped_s: float, poll_s: float = 0.0) -> None:
    env = {**os.environ, **SAFE_ENV, "NCCL_DEBUG": "WARN"}
    ranks = [subprocess.Popen([sys.executable, "-c", RANKS, str(r)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        for p in ranks:
            assert p.stdout is not None
            print(p.stdout.readline().strip(), flush=True)
        time.sleep(3)
        ask("rank1-behind", out)
        # A stopped process answers nothing, its RAS thread included: stop the rank that
        # does not hold RAS's listening socket, and ask the one that does.
        holder = listener_pid()
        victim = next(p for p in ranks if p.pid != holder)
        print(f"RAS listens in pid {holder}; stopping pid {victim.pid}", flush=True)
        os.kill(victim.pid, signal.SIGSTOP)
        if poll_s:
            print(f"== RAS asked every 5 s (4 s each) after the stop, for {poll_s:g} s")
            poll(poll_s)
            return
        time.sleep(10)
        ask("stopped-10s", out, timeout=30)
        time.sleep(max(0.0, stopped_s - 40))
        ask(f"stopped-{int(stopped_s)}s", out, timeout=30)
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def rank_to_stop() -> int | None:
    """A validate rank (a process nvidia-smi shows on a GPU) that does not hold RAS's
    listening socket, once both ranks are on their GPUs."""
    proc = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False)
    pids = []
    for p in proc.stdout.split():
        try:  # a validate rank names itself (worker/cli.py: nodetune-rank<local>)
            if Path(f"/proc/{p}/comm").read_text().startswith("nodetune-rank"):
                pids.append(int(p))
        except (OSError, ValueError):
            continue
    holder = listener_pid()
    if len(pids) < 2 or holder is None:
        return None
    return next((p for p in pids if p != holder), None)


def hung_validate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", 1, {})
        cmd = [sys.executable, "-m", "nodetune", "validate", str(inv), "--json", "--backend",
               "nccl", "--sizes", "256M:2G", "--iters", "3000", "--warmup", "5",
               "--timeout", "40"]
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **SAFE_ENV},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stopped = None
        deadline = time.monotonic() + 120
        while stopped is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            pid = rank_to_stop()
            if pid is not None:
                time.sleep(5)  # into the measurement
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                stopped = pid
                print(f"== validate: stopped the rank of pid {pid} (RAS listens in "
                      f"pid {listener_pid()})", flush=True)
        stdout, stderr = proc.communicate(timeout=300)
        (out / "validate-hung.json").write_text(stdout)
        (out / "validate-hung.stderr").write_text(stderr)
        try:
            doc = json.loads(stdout)
        except ValueError:
            doc = {}
        print(f"== validate exit {proc.returncode}")
        print("error:", json.dumps(doc.get("error"), indent=1)[:2000])
        print("ras:", json.dumps(doc.get("ras"), indent=1)[:3000])
        print(stderr[-1500:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--stopped-s", type=float, default=75.0)
    ap.add_argument("--skip-client", action="store_true")
    ap.add_argument("--skip-validate", action="store_true")
    ap.add_argument("--poll-s", type=float, default=0.0,
                    help="after the stop, ask RAS every 5 s for this long instead")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_client:
        client(args.out, args.stopped_s, args.poll_s)
    if not args.skip_validate:
        hung_validate(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
