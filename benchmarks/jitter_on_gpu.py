#!/usr/bin/env python3
"""Jitter and stragglers on real GPUs (issue 40, item 3): ``nodetune validate`` between two
one-GPU "nodes" of one machine (``ansible_connection: local``, GPUs 0 and 1, NCCL), then
nccl-tests' ``all_reduce_perf -g 2 -I 1 -J FILE`` on the same two GPUs, and the same reader
(benchmarks/read_nccl_json.py, the keys of nccl-tests' tools/analyze_perf_json.py) on both
documents; nccl-tests' own reader too where its source is given. Then the same validate
over gloo (CPU), so the worker's gathering of the ranks' rounds runs on both backends.

  python3 benchmarks/jitter_on_gpu.py --nccl-tests BUILD/all_reduce_perf \\
      [--nccl-tests-src SRC] [--sizes 1M:256M] [--out DIR]

Each figure is printed as measured; nothing is judged here but that every document
reads and that the per-size CV is present.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from validate_vs_nccl_tests import SAFE_ENV, inventory  # beside this script
from validate_wall import run_validate_json

HERE = Path(__file__).resolve().parent


def read(doc_path: Path, *, in_place: bool = True) -> str:
    cmd = [sys.executable, str(HERE / "read_nccl_json.py"), str(doc_path),
           *(["--in-place"] if in_place else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    return f"$ {' '.join(cmd)}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-tests", required=True, help="all_reduce_perf built for this NCCL")
    ap.add_argument("--nccl-tests-src", type=Path, help="nccl-tests' source (its tools/)")
    ap.add_argument("--sizes", default="1M:256M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", 1, {})
        for backend, sizes in (("nccl", args.sizes), ("gloo", "1M:4M")):
            code, doc, wall, stderr = run_validate_json(
                inv, ["--backend", backend, "--sizes", sizes, "--iters", str(args.iters)],
                SAFE_ENV)
            path = args.out / f"validate-{backend}.json"
            path.write_text(json.dumps(doc, indent=2))
            sizes_doc = (doc.get("result") or {}).get("sizes") or []
            print(f"== validate --backend {backend} --sizes {sizes}: exit {code}, "
                  f"{wall:.1f} s, {len(doc.get('results') or [])} results rows")
            if code != 0:
                print(stderr[-3000:])
            for s in sizes_doc:
                p = s.get("per_iter") or {}
                print(f"  {s.get('bytes'):>11}  busbw {s.get('busbw', 0):8.2f}  "
                      f"rounds {len(p.get('times_us') or [])}  min {p.get('min_us')}  "
                      f"max {p.get('max_us')}  cv% {p.get('cv_pct')}")
            print("  straggler:", (doc.get("result") or {}).get("straggler"))
            print(read(path))
            ok &= code == 0 and bool(doc.get("results")) and all(
                (s.get("per_iter") or {}).get("cv_pct") is not None for s in sizes_doc)
        lo, hi = args.sizes.split(":")
        ref = args.out / "nccl-tests.json"
        cmd = [args.nccl_tests, "-b", lo, "-e", hi, "-f", "4", "-g", "2", "-n",
               str(args.iters), "-w", "5", "-I", "1", "-J", str(ref)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300,
                              env={**os.environ, **SAFE_ENV})
        (args.out / "nccl-tests.txt").write_text(proc.stdout + proc.stderr)
        print(f"== {' '.join(cmd)}: exit {proc.returncode}\n{proc.stdout[-4000:]}")
        if ref.exists():
            print(read(ref))
        if args.nccl_tests_src is not None:
            tool = args.nccl_tests_src / "tools" / "analyze_perf_json.py"
            for doc_path in (args.out / "validate-nccl.json", ref):
                proc = subprocess.run([sys.executable, str(tool), str(doc_path), "--in-place",
                                       "--all"], capture_output=True, text=True, check=False,
                                      timeout=120)
                print(f"== nccl-tests' reader on {doc_path.name}: exit {proc.returncode}\n"
                      f"{(proc.stdout + proc.stderr)[-3000:]}")
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
