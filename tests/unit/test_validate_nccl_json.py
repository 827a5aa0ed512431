"""The ``results`` array in nccl-tests -J's shape, and a reader written against nccl-tests'
own JSON reader reading it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodetune.measure import jitter
from nodetune.measure.sweep import SizeResult
from nodetune.validate import nccl_json
from nodetune.validate.result import PairResult, Transport, Verdict

# nccl-tests 2.19.6 (commit a0b82b2), src/util.cu: the keys of one results[] record in the
# order its writer emits them (writeBenchmarkLinePreamble, writeBenchmarkLineBody and
# writePerIterReport per placement, writeBenchmarkLineTerminator), with their JSON types.
RECORD = {"size": int, "count": int, "type": str, "redop": str, "root": str,
          "out_of_place": (dict, type(None)), "out_of_place_per_iter": dict,
          "in_place": (dict, type(None)), "in_place_per_iter": dict,
          "actual_iterations": int, "experiment_name": str}
BODY = {"time": float, "alg_bw": float, "bus_bw": float, "nwrong": float}
PER_ITER = {"skipped_iterations": int, "min_us": float, "max_us": float, "avg_us": float,
            "p50_us": float, "p95_us": float, "p99_us": float, "stdev_us": float,
            "cv_pct": float, "times_us": list, "per_process_max_times_us": list}
READER = Path(__file__).resolve().parents[2] / "benchmarks" / "read_nccl_json.py"


def _result(collective: str = "all_reduce") -> PairResult:
    rows = [[10.0, 12.0, 11.0, 13.0], [11.0, 10.0, 14.0, 12.0]]
    sizes = tuple(SizeResult(b, b // 4, "float", 12.0, 0.5, 0.5, 0, rounds=4,
                             per_iter=jitter.per_iter(rows)) for b in (1 << 20, 4 << 20))
    return PairResult(hosts=("node-a", "node-b"), backend="gloo", nproc_per_node=1, world=2,
                      sizes=sizes, transport=Transport.gloo(("eth0",)), verdict=Verdict.PASS,
                      reasons=(), collective=collective)


def test_the_records_have_nccl_tests_keys_types_and_order() -> None:
    out = json.loads(json.dumps(nccl_json.results(_result(), iters=20)))
    assert len(out) == 2
    for rec in out:
        assert list(rec) == [k for k in RECORD if k != "out_of_place_per_iter"]
        for key, kind in RECORD.items():
            if key in rec:
                assert isinstance(rec[key], kind), key
        assert rec["out_of_place"] is None                # all_reduce is timed in place
        assert {k: type(v) for k, v in rec["in_place"].items()} == BODY
        assert {k: type(v) for k, v in rec["in_place_per_iter"].items()} == PER_ITER
    rec = out[0]
    assert (rec["size"], rec["count"], rec["type"], rec["redop"], rec["root"]) == (
        1 << 20, 262144, "float", "sum", "    -1")
    assert rec["in_place"] == {"time": 12.0, "alg_bw": 0.5, "bus_bw": 0.5, "nwrong": 0.0}
    assert rec["in_place_per_iter"]["times_us"] == [11.0, 12.0, 14.0, 13.0]
    assert rec["actual_iterations"] == 80 and rec["experiment_name"] == ""


def test_other_collectives_are_out_of_place_with_a_ranks_count() -> None:
    rec = nccl_json.results(_result("all_gather"), iters=20)[0]
    assert rec["in_place"] is None and rec["out_of_place"]["bus_bw"] == 0.5
    assert "out_of_place_per_iter" in rec and "in_place_per_iter" not in rec
    assert (rec["redop"], rec["count"]) == ("none", 262144 // 2)


def test_one_rank_has_no_process_rows() -> None:
    one = jitter.per_iter([[1.0, 2.0]])
    assert "per_process_max_times_us" not in nccl_json.per_iter_doc(one)


def _read(tmp_path: Path, doc: object, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([sys.executable, str(READER), str(path), *args], check=False,
                          capture_output=True, text=True, timeout=60)


def test_the_reader_reads_the_results_beside_the_rest_of_the_document(tmp_path: Path) -> None:
    result = _result()
    doc = {"verb": "validate", "status": "pass", "result": result.to_dict(),
           "results": nccl_json.results(result, iters=20)}
    done = _read(tmp_path, json.loads(json.dumps(doc, default=str)), "--in-place")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["size", "time(us)", "busbw"]
    first = lines[1].split()
    assert first[:5] == ["1048576", "12.0", "0.50", "0", "12.5"]
    assert first[5:9] == ["11.0", "14.0", "14.0", "8.9%"]
    # rank 1's rounds average 11.75 us, rank 0's 11.5: the reader names process 1
    assert lines[1].endswith("process 1 (11.8us)")
    assert lines[-1] == "times_us == max over process rows: PASS"


def test_the_reader_says_so_when_the_placement_was_not_run(tmp_path: Path) -> None:
    done = _read(tmp_path, {"results": nccl_json.results(_result(), iters=20)})
    assert done.returncode == 1 and "no out_of_place measurement" in done.stderr


@pytest.mark.parametrize("collective", ["reduce_scatter", "alltoall"])
def test_the_reader_reads_out_of_place_collectives_unchanged(tmp_path: Path,
                                                            collective: str) -> None:
    done = _read(tmp_path, {"results": nccl_json.results(_result(collective), iters=20)})
    assert done.returncode == 0, done.stderr
