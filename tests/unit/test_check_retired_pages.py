"""gpu.retired_pages on the real `nvidia-smi -q -x` of 4x H200 and 1x H100
(tests/fixtures/check/h200-x4, h100-x1), which remap rows and report retired pages N/A,
and on variants derived from them in code with counts in the places a GPU that retires
pages fills."""

from __future__ import annotations

from pathlib import Path

from nodetune.check import retired_pages
from nodetune.check.model import Status

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check"
H200 = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
H100 = (FIX / "h100-x1" / "nvidia-smi-q-x.xml").read_text()


def retiring(xml: str, *, sbe: int, dbe: int, pending: str = "No") -> str:
    """``xml`` with its second GPU's retired pages filled in (the first GPU's left N/A)."""
    head, sep, rest = xml.partition("<retired_pages>")
    head2, sep2, rest2 = rest.partition("<retired_pages>")
    block, end, tail = rest2.partition("</retired_pages>")
    block = block.replace("<retired_count>N/A</retired_count>",
                          f"<retired_count>{sbe}</retired_count>", 1)
    block = block.replace("<retired_count>N/A</retired_count>",
                          f"<retired_count>{dbe}</retired_count>", 1)
    block = block.replace("<pending_retirement>N/A</pending_retirement>",
                          f"<pending_retirement>{pending}</pending_retirement>")
    return head + sep + head2 + sep2 + block + end + tail


def test_h200_and_h100_remap_rows_and_skip_with_the_reason() -> None:
    for xml, model in ((H200, "NVIDIA H200"), (H100, "NVIDIA H100 80GB HBM3")):
        r = retired_pages.judge(retired_pages.parse(xml))
        assert r.status is Status.SKIP, r
        assert f"({model})" in r.message and "remap rows" in r.message
        assert "GH100" in r.source


def test_retired_pages_under_the_limits_pass() -> None:
    r = retired_pages.judge(retired_pages.parse(retiring(H200, sbe=2, dbe=1)))
    assert r.status is Status.PASS
    assert r.measured == "GPU 1: SBE 2, DBE 1"  # the GPUs reporting N/A are left out


def test_dcgms_limits_fail_and_warn() -> None:
    r = retired_pages.judge(retired_pages.parse(retiring(H200, sbe=50, dbe=13)))
    assert r.status is Status.FAIL and "GPU 1: 63 retired pages >= 63" in r.message
    r = retired_pages.judge(retired_pages.parse(retiring(H200, sbe=0, dbe=16)))
    assert r.status is Status.WARN and "16 double-bit retired pages > 15" in r.message
    r = retired_pages.judge(retired_pages.parse(retiring(H200, sbe=1, dbe=0, pending="Yes")))
    assert r.status is Status.WARN and "pending" in r.message


def test_no_xml_skips() -> None:
    assert retired_pages.judge(retired_pages.parse("")).status is Status.SKIP
