"""``fabric.rdma_bw[D]``: per-HCA RDMA write bandwidth from perftest's ``ib_write_bw``
(linux-rdma/perftest), judged against a fraction of the port's rate.

Report (perftest's result table, src/perftest_parameters.h ``RESULT_FMT_G``/``RESULT_FMT``
and ``REPORT_FMT``, https://github.com/linux-rdma/perftest read 2026-11-26)::

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             392.70             392.51		     0.748655

``--report_gbits`` prints Gb/sec (10^9 bits: perftest's format factor 125000000);
otherwise the unit is 2^20 bytes a second (factor 0x100000), headed ``MB/sec`` before
perftest 24.07 and ``MiB/sec`` since (commit 1d202bb, "Display proper unit for MiB/sec
results"). GPU memory is measured with ``--use_cuda=<cuda device id>`` (perftest README).

Pass mark: Azure's node health checks run ``ib_write_bw ... --report_gbits --use_cuda``
per HCA and hold it to 180 Gb/s on HDR 200 Gb/s ports (Azure/azurehpc-health-checks,
conf/nd96asr_v4.conf ``check_ib_bw_gdr 180.0``, i.e. 0.9 of the rate; its NDR 400 H100
conf asks 380, 0.95), read 2026-11-26; 0.9 is used for host and GPU memory alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodetune.measure.result import CheckResult, failed, passed

PASS_FRACTION = 0.9
SOURCE = "0.9 x port rate: Azure NHC check_ib_bw_gdr (180 Gb/s on HDR 200)"
_HEADER = re.compile(r"BW average\[(?P<unit>Gb/sec|MB/sec|MiB/sec)\]")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+"
                  r"(?P<avg>[\d.]+)\s+(?P<rate>[\d.]+)\s*$")


def rate_gbps(text: object) -> float | None:
    """``400 Gb/sec (4X NDR)`` (sysfs ``ports/N/rate``) -> 400.0."""
    m = re.match(r"^\s*([\d.]+)\s*Gb/sec", str(text or ""))
    return float(m[1]) if m else None


@dataclass(frozen=True, slots=True)
class BwResult:
    """One ib_write_bw run."""

    device: str
    cuda: bool          # GPU memory to GPU memory (--use_cuda)
    size: int           # message bytes
    avg_gbps: float     # average bandwidth, Gb/s
    peak_gbps: float


def parse(text: str, *, device: str, cuda: bool) -> BwResult:
    """The last result row of an ``ib_write_bw`` report, in Gb/s.

    Raises:
        ValueError: no result table (the run failed: perftest prints its reason).
    """
    unit = None
    row = None
    for line in text.splitlines():
        if h := _HEADER.search(line):
            unit = h["unit"]
        elif unit and (m := _ROW.match(line)):
            row = m
    if unit is None or row is None:
        tail = " | ".join(text.strip().splitlines()[-2:])
        raise ValueError(f"ib_write_bw printed no result ({tail or 'no output'})")
    scale = 1.0 if unit == "Gb/sec" else 8 * (1 << 20) / 1e9
    return BwResult(device, cuda, int(row["bytes"]), round(float(row["avg"]) * scale, 2),
                    round(float(row["peak"]) * scale, 2))


def judge(result: BwResult, rate_gbps: float | None, peer: str) -> CheckResult:
    """Pass at >= 0.9 of the port rate."""
    mem = "GPU memory" if result.cuda else "host memory"
    name = f"fabric.rdma_bw[{result.device}{'/cuda' if result.cuda else ''}]"
    measured = f"{result.avg_gbps:g} Gb/s ({mem}, {result.size} B, with {peer})"
    if not rate_gbps:
        return failed(name, measured, "a port rate", SOURCE,
                      f"{result.device}: the port reports no rate to judge against")
    want = round(PASS_FRACTION * rate_gbps, 1)
    expected = f">= {want:g} Gb/s (0.9 x {rate_gbps:g})"
    if result.avg_gbps < want:
        return failed(name, measured, expected, SOURCE,
                      f"{result.device} to {peer}: {result.avg_gbps:g} Gb/s, below "
                      f"{want:g} ({mem})")
    return passed(name, measured, expected, SOURCE)
