"""A measurement as nccl-tests ``-J`` writes it: the ``results`` array of its JSON output.

Field names, nesting and types follow nccl-tests 2.19.6's writer (NVIDIA/nccl-tests,
commit a0b82b2, "NCCL_TESTS_VERSION 2.19.6", 2026-07-09; read 2026-11-29),
``src/util.cu``:

- ``writeBenchmarkLinePreamble``: ``size`` (bytes, the larger of the send and receive
  buffers), ``count`` (elements per rank's parameter: ``paramcount`` of
  ``<Coll>GetCollByteCount``), ``type``, ``redop``, ``root`` (a string, ``"%6i"``);
- ``writeBenchmarkLineBody``: ``out_of_place`` then ``in_place``, each
  ``{"time", "alg_bw", "bus_bw", "nwrong"}`` (``nwrong`` a double, null without
  ``-c``); ``writeBenchMarkLineNullBody``: ``null`` for a placement not run;
- ``writePerIterReport`` (``-I``): ``<placement>_per_iter`` with
  ``skipped_iterations, min_us, max_us, avg_us, p50_us, p95_us, p99_us, stdev_us,
  cv_pct, times_us`` and, with more than one process, ``per_process_max_times_us``;
- ``writeBenchmarkLineTerminator``: ``actual_iterations``, ``experiment_name``.

What nodetune fills differently, and why:

- One placement only. all_reduce is timed in place (one buffer), so its numbers go
  under ``in_place`` and ``out_of_place`` is null; the other collectives use two
  buffers, so theirs go under ``out_of_place`` and ``in_place`` is null (nccl-tests
  times both; nodetune times the one it runs).
- ``time`` is the mean over ranks of each rank's median round (nccl-tests: the mean
  over ranks of one timed loop); a ``*_per_iter`` sample is a round of ``iters`` ops
  (its time the mean op), not one op timed with CUDA events.
- ``actual_iterations`` is the ops timed: rounds x iters.
- Left out: ``cpu_time`` (nccl-tests ``-C``; ``time`` is already host wall time), and
  the document's other top-level keys (``version``, ``config``, ``devices``, ``env``,
  ``out_of_bounds``, ``average_bus_bandwidth`` ...): report.json says those in its own
  words, and nccl-tests' average over sizes is one nodetune does not compute.
"""

from __future__ import annotations

from typing import Any

from nodetune.measure.jitter import PerIter
from nodetune.measure.sweep import SizeResult
from nodetune.validate.result import PairResult

# src/common.cu (test_opnames) and each <coll>.cu's RunTest: all_gather and alltoall run
# with the op name "none"; every collective here passes root -1 to TimeTest.
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none",
         "alltoall": "none"}
ROOT = -1


def results(result: PairResult, *, iters: int) -> list[dict[str, Any]]:
    """The ``results`` array of nccl-tests' JSON output for ``result``'s sizes."""
    return [_row(size, result.collective, result.world, iters) for size in result.sizes]


def _row(size: SizeResult, collective: str, world: int, iters: int) -> dict[str, Any]:
    body = {"time": size.time_us, "alg_bw": size.algbw, "bus_bw": size.busbw,
            "nwrong": float(size.wrong)}
    placement = "in_place" if collective == "all_reduce" else "out_of_place"
    row: dict[str, Any] = {
        "size": size.bytes,
        # nccl-tests' count is a rank's share for the collectives that split the buffer
        "count": size.count if collective == "all_reduce" else size.count // max(1, world),
        "type": size.type, "redop": REDOP.get(collective, "none"), "root": f"{ROOT:6d}",
        "out_of_place": None, "in_place": None}
    row[placement] = body
    if size.per_iter is not None:
        row[f"{placement}_per_iter"] = per_iter_doc(size.per_iter)
    row["actual_iterations"] = size.rounds * iters
    row["experiment_name"] = ""
    # nccl-tests writes out_of_place, out_of_place_per_iter, in_place, in_place_per_iter
    order = ["size", "count", "type", "redop", "root", "out_of_place", "out_of_place_per_iter",
             "in_place", "in_place_per_iter", "actual_iterations", "experiment_name"]
    return {k: row[k] for k in order if k in row}


def per_iter_doc(p: PerIter) -> dict[str, Any]:
    """``writePerIterReport``'s object; ``per_process_max_times_us`` only with more than
    one rank, as nccl-tests writes it."""
    doc: dict[str, Any] = {
        "skipped_iterations": p.skipped_iterations, "min_us": p.min_us, "max_us": p.max_us,
        "avg_us": p.avg_us, "p50_us": p.p50_us, "p95_us": p.p95_us, "p99_us": p.p99_us,
        "stdev_us": p.stdev_us, "cv_pct": p.cv_pct, "times_us": list(p.times_us)}
    if len(p.per_process_max_times_us) > 1:
        doc["per_process_max_times_us"] = [list(r) for r in p.per_process_max_times_us]
    return doc
