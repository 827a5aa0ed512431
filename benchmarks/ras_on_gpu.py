#!/usr/bin/env python3
"""NCCL's RAS on a real communicator, and a hung rank named by `validate`, on one machine
with two GPUs.

1. **The client against real NCCL.** Two ranks (one per GPU, torch.distributed over
   NCCL) run one all_reduce; then rank 1 stops calling collectives while rank 0 starts
   another. ``python -S -m nodetune.validate.ras`` is asked twice: while rank 1 is merely
   behind, and after rank 1 is stopped (SIGSTOP) for ``--stopped-s`` seconds. Each answer
   is printed and kept under --out.
2. **validate names the hung rank.** Two inventory hosts with ``ansible_connection:
   local`` stand for two nodes, one GPU each (as benchmarks/validate_vs_nccl_tests.py).
   While validate measures, the rank of ``gpu-node-1`` is stopped (SIGSTOP; the process
   nvidia-smi shows on GPU 1); validate's --timeout sees the stall, asks RAS on rank 0's node
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


def ask(label: str, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-S", "-m", "nodetune.validate.ras", "--timeout",
                           "10"], capture_output=True, text=True, cwd=REPO, check=False)
    (out / f"ras-{label}.json").write_text(proc.stdout)
    print(f"== RAS {label}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-500:]}")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {}


def client(out: Path, stopped_s: float) -> None:
    env = {**os.environ, **SAFE_ENV, "NCCL_DEBUG": "WARN"}
    ranks = [subprocess.Popen([sys.executable, "-c", RANKS, str(r)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        for p in ranks:
            assert p.stdout is not None
            print(p.stdout.readline().strip(), flush=True)
        time.sleep(3)
        ask("rank1-behind", out)
        os.kill(ranks[1].pid, signal.SIGSTOP)
        time.sleep(stopped_s)
        ask(f"rank1-stopped-{int(stopped_s)}s", out)
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def rank_one_pid() -> int | None:
    """The process on GPU 1 (gpu-node-1's rank, ``nodetune_cuda_visible_devices: 1``)."""
    def query(*args: str) -> list[list[str]]:
        proc = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader"],
                              capture_output=True, text=True, check=False)
        return [[f.strip() for f in ln.split(",")] for ln in proc.stdout.splitlines() if ln]
    uuid = {row[0]: row[1] for row in query("--query-gpu=index,uuid")}.get("1")
    on_one = [int(row[0]) for row in query("--query-compute-apps=pid,gpu_uuid")
              if len(row) == 2 and row[1] == uuid]
    return on_one[0] if on_one else None


def hung_validate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", 1, {})
        cmd = [sys.executable, "-m", "nodetune", "validate", str(inv), "--json", "--backend",
               "nccl", "--sizes", "64M:256M", "--iters", "2000", "--warmup", "5",
               "--timeout", "40"]
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **SAFE_ENV},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stopped = None
        deadline = time.monotonic() + 120
        while stopped is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            pid = rank_one_pid()
            if pid is not None:
                time.sleep(8)  # into the measurement
                os.kill(pid, signal.SIGSTOP)
                stopped = pid
                print(f"== validate: stopped rank 1 (pid {pid})", flush=True)
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
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_client:
        client(args.out, args.stopped_s)
    hung_validate(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
