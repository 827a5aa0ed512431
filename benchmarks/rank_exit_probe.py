#!/usr/bin/env python3
"""How long a rank's end takes on one machine with two GPUs: ``destroy_process_group``,
then the process's exit until its parent collects it.

Two forked ranks (as validate's worker forks them) set up NCCL, replay a CUDA graph of
20 all_reduces at 1 MiB, 16 MiB, 256 MiB and 1 GiB, then end in one of three ways:

    destroy     destroy_process_group(), then os._exit
    nodestroy   os._exit at once
    free        torch.cuda.empty_cache(), destroy_process_group(), os._exit

    python3 benchmarks/rank_exit_probe.py destroy      # torch's Python, NCCL_NVLS_ENABLE=0
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

SIZES = (1 << 20, 1 << 24, 1 << 28, 1 << 30)


def rank(r: int, port: int, report_fd: int, mode: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                      WORLD_SIZE="2")
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", device_id=torch.device("cuda", r))
    for nbytes in SIZES:
        x = torch.ones(nbytes // 4, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(x)  # NCCL's lazy set-up, outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(20):
                dist.all_reduce(x)
        graph.replay()
        torch.cuda.synchronize()
        del graph, x
    dist.barrier(device_ids=[r])
    torch.cuda.synchronize()
    took: dict[str, float] = {}
    started = time.time()
    if mode == "free":
        torch.cuda.empty_cache()
        took["empty_cache_s"] = time.time() - started
        started = time.time()
    if mode in ("destroy", "free"):
        dist.destroy_process_group()
        took["destroy_s"] = time.time() - started
    took["exit_at"] = time.time()
    os.write(report_fd, (json.dumps({"rank": r, **took}) + "\n").encode())
    os._exit(0)


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "destroy"
    port = 29000 + os.getpid() % 1000
    read_fd, write_fd = os.pipe()
    pids = {}
    for r in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            rank(r, port, write_fd, mode)
        pids[pid] = r
    os.close(write_fd)
    collected = {}
    while pids:
        pid, _ = os.wait()
        collected[pids.pop(pid)] = time.time()
    with os.fdopen(read_fd) as fh:
        reports = [json.loads(line) for line in fh.read().splitlines()]
    for rep in reports:
        rep["exit_to_collected_s"] = round(collected[rep["rank"]] - rep.pop("exit_at"), 3)
    print(mode, json.dumps(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
