#!/usr/bin/env python3
"""Read nccl-tests' JSON output (-J, with -I) the way nccl-tests' own reader does.

nccl-tests ships tools/analyze_perf_json.py (2.19.6): it loads the document, walks
``data['results']``, reads ``r['size']``, the placement's ``<placement>_per_iter``
object (``avg_us``, ``min_us``, ``max_us``, ``p99_us``, ``cv_pct``, ``times_us``,
``per_process_max_times_us``), and checks that ``times_us`` is the maximum over the
process rows. This script reads those same keys, plus each placement's ``time``,
``bus_bw`` and ``nwrong``, so it reads ``nodetune validate --json`` (its ``results``
array) and an nccl-tests ``-J`` file alike:

  nodetune validate inventory/lab --json > run.json
  python3 benchmarks/read_nccl_json.py run.json --in-place     # all_reduce: in place

As in nccl-tests' reader, the out-of-place columns are read unless --in-place is given;
nodetune times all_reduce in place and the other collectives out of place, and leaves
the placement it did not run null, as nccl-tests does for one it skipped.
"""

from __future__ import annotations

import argparse
import json
import sys

PROCESS_TIMES_KEY = "per_process_max_times_us"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file")
    parser.add_argument("--in-place", action="store_true",
                        help="read the in-place columns instead of the out-of-place ones")
    args = parser.parse_args(argv)
    with open(args.json_file) as fh:
        data = json.load(fh)
    placement = "in_place" if args.in_place else "out_of_place"
    print(f"{'size':>12}  {'time(us)':>9}  {'busbw':>7}  {'#wrong':>6}  {'avg_us':>9}  "
          f"{'i_min':>9}  {'i_max':>9}  {'i_p99':>9}  {'cv%':>6}  slowest process")
    mismatches = 0
    for r in data["results"]:
        body = r.get(placement)
        if body is None:
            print(f"{r['size']:12d}  no {placement} measurement", file=sys.stderr)
            return 1
        per_iter = r.get(placement + "_per_iter", {})
        rows = per_iter.get(PROCESS_TIMES_KEY, [])
        slowest = "-"
        if rows:
            avgs = [sum(times) / len(times) for times in rows]
            worst = max(range(len(rows)), key=avgs.__getitem__)
            slowest = f"process {worst} ({avgs[worst]:.1f}us)"
            expected = [max(times[i] for times in rows) for i in range(min(map(len, rows)))]
            got = per_iter.get("times_us", [])
            if len(got) != len(expected) or any(abs(a - b) >= 0.001
                                                for a, b in zip(got, expected, strict=True)):
                mismatches += 1
        nwrong = "N/A" if body["nwrong"] is None else f"{body['nwrong']:g}"
        stats = (f"{per_iter['avg_us']:9.1f}  {per_iter['min_us']:9.1f}  "
                 f"{per_iter['max_us']:9.1f}  {per_iter['p99_us']:9.1f}  "
                 f"{per_iter['cv_pct']:5.1f}%" if per_iter else f"{'-':>9}  " * 4 + f"{'-':>6}")
        print(f"{r['size']:12d}  {body['time']:9.1f}  {body['bus_bw']:7.2f}  {nwrong:>6}  "
              f"{stats}  {slowest}")
    print("times_us == max over process rows: " + ("PASS" if not mismatches
                                                   else f"FAIL ({mismatches})"))
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
