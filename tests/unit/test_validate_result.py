"""busbw arithmetic (the worker's, which is what gets reported) against nccl-tests' formula,
and the verdict."""

from __future__ import annotations

import pytest

from nodetune.collective.worker.collectives import bandwidths
from nodetune.measure import thresholds
from nodetune.validate.result import (
    SizeResult,
    Transport,
    Verdict,
    evaluate,
    human_bytes,
)


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_bus_factor_is_2_n_minus_1_over_n(n: int, factor: float) -> None:
    algbw, busbw = bandwidths(1 << 30, 1.0, n)
    assert busbw / algbw == pytest.approx(factor)


def test_bandwidths_match_nccl_tests_row() -> None:
    # nccl-tests all_reduce_perf prints algbw = bytes / 1e9 / t(s) and
    # busbw = algbw * 2(n-1)/n; e.g. 1 GiB in 6500 us over 16 ranks:
    algbw, busbw = bandwidths(1 << 30, 6500e-6, 16)
    assert algbw == pytest.approx(165.19, abs=0.01)
    assert busbw == pytest.approx(165.19 * 1.875, abs=0.02)


def test_bandwidths_two_ranks_busbw_equals_algbw() -> None:
    algbw, busbw = bandwidths(64 << 20, 0.05, 2)
    assert algbw == busbw == pytest.approx(67108864 / 1e9 / 0.05)


def row(nbytes: int, busbw: float, wrong: int = 0) -> SizeResult:
    return SizeResult(nbytes, nbytes // 4, "float", 1.0, busbw, busbw, wrong)


GLOO = Transport.gloo(("eth0",))
SIZES = (row(1 << 20, 0.5), row(64 << 20, 1.2))


def test_pass_without_threshold_notes_it() -> None:
    verdict, reasons, notes = evaluate(SIZES, GLOO, threshold=None, expect="any")
    assert verdict is Verdict.PASS and reasons == ()
    assert any("no bandwidth threshold" in n for n in notes)


def test_threshold_applies_to_largest_size_only() -> None:
    th = thresholds.Threshold(1.0, "--min-busbw")
    verdict, reasons, _ = evaluate(SIZES, GLOO, threshold=th, expect="any")
    assert verdict is Verdict.PASS, reasons
    th = thresholds.Threshold(2.0, "--min-busbw")
    verdict, reasons, _ = evaluate(SIZES, GLOO, threshold=th, expect="any")
    assert verdict is Verdict.FAIL
    assert reasons == ("busbw 1.20 GB/s at 64 MiB is below 2 GB/s (--min-busbw)",)


def test_any_wrong_value_fails() -> None:
    verdict, reasons, _ = evaluate((row(1 << 20, 9.0, wrong=3),), GLOO, threshold=None,
                                   expect="any")
    assert verdict is Verdict.FAIL
    assert "3 wrong values at 1 MiB" in reasons[0]


def test_transport_mismatch_fails() -> None:
    verdict, reasons, _ = evaluate(SIZES, GLOO, threshold=None, expect="ib")
    assert verdict is Verdict.FAIL and "gloo" in reasons[0]


def test_nothing_measured_fails() -> None:
    verdict, reasons, _ = evaluate((), GLOO, threshold=None, expect="any")
    assert verdict is Verdict.FAIL and reasons == ("no size was measured",)


def test_profile_at_larger_size_than_measured_is_noted() -> None:
    prof = thresholds.profile_named("h100-2node-aws-p5")
    th = thresholds.Threshold(0.1, "profile", prof)
    _, _, notes = evaluate(SIZES, GLOO, threshold=th, expect="any")
    assert any("states its number at 1 GiB" in n for n in notes)


def test_human_bytes() -> None:
    assert human_bytes(1 << 30) == "1 GiB"
    assert human_bytes(3 << 20) == "3 MiB"
    assert human_bytes(1000) == "1000 B"


def test_a_data_path_over_the_ssh_interface_fails_only_an_expectation() -> None:
    warning = "the data path is the interface SSH uses on a (eth0): ..."
    verdict, reasons, _ = evaluate(SIZES, GLOO, threshold=None, expect="any", over_ssh=warning)
    assert verdict is Verdict.PASS and reasons == ()
    verdict, reasons, _ = evaluate(SIZES, GLOO, threshold=None, expect="socket",
                                   over_ssh=warning)
    assert verdict is Verdict.FAIL
    assert reasons == (f"expected socket over the fabric, but {warning}",)
    verdict, _, _ = evaluate(SIZES, Transport.gloo(("eth1",)), threshold=None, expect="socket")
    assert verdict is Verdict.PASS
