"""Per-round statistics (nccl-tests -I) and the straggler rule, against hand-computed values;
the worker's size event carrying every rank's rounds into a result row."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest

from nodetune.collective.answers import size_from
from nodetune.measure import jitter
from nodetune.measure.sweep import SizeResult

# Two ranks, four rounds each (us). Per round the slowest rank: 11, 12, 14, 13.
ROWS = [[10.0, 12.0, 11.0, 13.0], [11.0, 10.0, 14.0, 12.0]]


def test_statistics_are_nccl_tests_over_the_slowest_rank_of_each_round() -> None:
    p = jitter.per_iter(ROWS)
    assert p.times_us == (11.0, 12.0, 14.0, 13.0)
    assert (p.min_us, p.max_us, p.avg_us) == (11.0, 14.0, 12.5)
    # p50 = sorted[n/2] = sorted[2]; p95, p99 by nearest rank: index min(3, (4p+99)/100-1) = 3
    assert (p.p50_us, p.p95_us, p.p99_us) == (13.0, 14.0, 14.0)
    # population stdev: sqrt((1.5² + 0.5² + 0.5² + 1.5²) / 4) = sqrt(1.25)
    assert p.stdev_us == pytest.approx(math.sqrt(1.25))
    assert p.cv_pct == pytest.approx(math.sqrt(1.25) / 12.5 * 100)  # 8.944 %
    assert p.per_process_max_times_us == ((10.0, 12.0, 11.0, 13.0), (11.0, 10.0, 14.0, 12.0))
    assert p.skipped_iterations == 0


def test_nearest_rank_percentiles_on_a_hundred_rounds() -> None:
    p = jitter.per_iter([[float(t) for t in range(1, 101)]])
    # nccl-tests: p95 = sorted[94], p99 = sorted[98], p50 = sorted[50]
    assert (p.p50_us, p.p95_us, p.p99_us) == (51.0, 95.0, 99.0)


def test_steady_rounds_have_no_spread_and_zero_time_no_division() -> None:
    assert jitter.per_iter([[5.0, 5.0, 5.0]]).cv_pct == 0.0
    assert jitter.per_iter([[0.0, 0.0]]).cv_pct == 0.0


@pytest.mark.parametrize("rows", [[], [[]], [[1.0, 2.0], [1.0]], [[1.0, float("nan")]],
                                  [[-1.0]]])
def test_malformed_round_times_are_refused(rows: list[list[float]]) -> None:
    with pytest.raises(ValueError, match="round times"):
        jitter.per_iter(rows)


def _size(medians: list[float]) -> jitter.PerIter:
    return jitter.per_iter([[m, m * 0.99, m * 1.01] for m in medians])


HOSTS = ("node-a", "node-b")


def test_a_rank_slowest_at_every_size_is_named_with_its_node() -> None:
    sizes = [_size([10, 10, 12, 10]), _size([20, 21, 25, 20]), _size([40, 40, 50, 41])]
    s = jitter.straggler(sizes, hosts=HOSTS, nproc_per_node=2)
    assert s is not None
    assert (s.rank, s.host, s.slowest_sizes, s.sizes) == (2, "node-b", 3, 3)
    # ratios to the median rank: 12/10, 25/20.5, 50/40.5 -> the median 25/20.5
    assert s.ratio == pytest.approx(round(25 / 20.5, 4))
    assert s.message == "rank 2 on node-b: the slowest rank at 3 of 3 sizes, 1.22x the median rank"


def test_two_of_three_sizes_is_enough_one_of_two_is_not() -> None:
    sizes = [_size([10, 13]), _size([20, 26]), _size([41, 40])]
    s = jitter.straggler(sizes, hosts=HOSTS, nproc_per_node=1)
    assert s is not None and (s.rank, s.host, s.slowest_sizes) == (1, "node-b", 2)
    assert jitter.straggler(sizes[1:], hosts=HOSTS, nproc_per_node=1) is None


def test_a_different_slowest_rank_at_each_size_names_nobody() -> None:
    sizes = [_size([12, 10, 10]), _size([10, 12, 10]), _size([10, 10, 12])]
    assert jitter.straggler(sizes, hosts=("a", "b", "c"), nproc_per_node=1) is None


def test_slowest_within_the_spread_is_no_straggler() -> None:
    sizes = [_size([10, 10.4, 10]), _size([20, 20.9, 20])]   # 1.04x, 1.045x the median rank
    assert jitter.straggler(sizes, hosts=("a", "b", "c"), nproc_per_node=1) is None


def test_a_tie_at_the_top_counts_for_nobody() -> None:
    sizes = [_size([10, 12, 12]), _size([20, 24, 24]), _size([40, 48, 40])]
    # rank 1 alone at the top at one size of three
    assert jitter.straggler(sizes, hosts=("a", "b", "c"), nproc_per_node=1) is None


def test_one_rank_or_no_rounds_names_nobody() -> None:
    assert jitter.straggler([_size([10]), _size([20])], hosts=("a",), nproc_per_node=1) is None
    assert jitter.straggler([None, None], hosts=HOSTS, nproc_per_node=1) is None
    assert jitter.straggler([], hosts=HOSTS, nproc_per_node=1) is None


def _event(**extra: object) -> dict[str, object]:
    return {"event": "size", "bytes": 1 << 20, "count": 262144, "type": "float",
            "time_us": 12.0, "algbw": 1.0, "busbw": 1.0, "wrong": 0, "rounds": 4, **extra}


def test_the_size_event_carries_every_ranks_rounds_into_the_row() -> None:
    row = size_from(_event(round_us=ROWS))
    assert row.per_iter == jitter.per_iter(ROWS)
    assert size_from(_event()).per_iter is None       # a worker from before: no rounds
    with pytest.raises(ValueError, match="round times"):
        size_from(_event(round_us=[[1.0], [1.0, 2.0]]))


def test_a_row_survives_report_json() -> None:
    row = size_from(_event(round_us=ROWS))
    again = SizeResult.from_dict(json.loads(json.dumps(asdict(row))))
    assert again == row
