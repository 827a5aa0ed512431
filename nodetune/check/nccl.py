"""One-node NCCL: an all_reduce across a node's own GPUs, judged against a profile.

The measurement is validate's (same worker, same nccl-tests-like timing, one
rank per GPU); this module only decides which pass mark applies and judges.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.errors import InputError
from nodetune.measure.thresholds import MARGIN, GiB, Profile

if TYPE_CHECKING:  # expect imports this module on the health check's every run
    from nodetune.measure.sweep import SizeResult

NAME = "gpu.allreduce"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.allreduce",
     "nodes with >= 2 GPUs: an all_reduce across them (validate's worker, one",
     "rank per GPU, 64M up to the profile's size); no wrong value, busbw at the",
     "largest size >= nodetune_check_min_busbw_gbps or the profile's pass mark",
     "(Azure NHC 8x H200 431, 8x H100 460 at 16G; 8x A100 228 at 8G; 4x H200",
     "NV18 326.6 at 4G, 0.9 x nccl-tests measured)"),
)
VAR_MIN = "nodetune_check_min_busbw_gbps"
VAR_PROFILE = "nodetune_check_profile"
NHC = "Azure NHC (Azure/azurehpc-health-checks) check_nccl_allreduce"

_PROFILES = (
    Profile(name="h200-1node-8gpu-azure", min_busbw_gbps=431.0, at_bytes=16 * GiB,
            algorithm="nccl-default", backend="nccl",
            source=f"{NHC} 431.0 at 16G, conf/nd96isr_h200_v5.conf (8x H200)"),
    Profile(name="h100-1node-8gpu-azure", min_busbw_gbps=460.0, at_bytes=16 * GiB,
            algorithm="nccl-default", backend="nccl",
            source=f"{NHC}: 460 GB/s at 16G, conf/nd96isr_h100_v5.conf (8x H100)"),
    Profile(name="a100-1node-8gpu-azure", min_busbw_gbps=228.0, at_bytes=8 * GiB,
            algorithm="nccl-default", backend="nccl",
            source=f"{NHC}: 228 GB/s at 8G, conf/nd96asr_v4.conf (8x A100)"),
    Profile(name="h200-1node-4gpu-nv18", min_busbw_gbps=round(MARGIN * 362.9, 1),
            at_bytes=4 * GiB, algorithm="nccl-default", backend="nccl",
            source="4x H200 (NV18) measured with nccl-tests v2.19.6 all_reduce_perf -g 4: "
                   "362.9 GB/s at 4 GiB (docs/benchmarks.md); pass mark = 0.9 x 362.9",
            reference=((64 << 20, 314.4), (GiB, 356.3), (4 * GiB, 362.9))),
)
PROFILES = MappingProxyType({p.name: p for p in _PROFILES})
# (product name word, GPUs) -> profile, for nodes whose inventory names none.
_BY_HARDWARE = {("H200", 8): "h200-1node-8gpu-azure", ("H100", 8): "h100-1node-8gpu-azure",
                ("A100", 8): "a100-1node-8gpu-azure", ("H200", 4): "h200-1node-4gpu-nv18"}


def profile_for(product: str, gpus: int, *, named: object = None) -> Profile | None:
    """The profile the inventory names, else the one for this GPU model and count.

    Raises:
        InputError: an unknown profile name.
    """
    if named not in (None, ""):
        try:
            return PROFILES[str(named)]
        except KeyError:
            raise InputError(f"{VAR_PROFILE} {named!r}: known profiles are "
                             + ", ".join(PROFILES)) from None
    for (word, count), name in _BY_HARDWARE.items():
        if word in product and count == gpus:
            return PROFILES[name]
    return None


def judge(sizes: Sequence[SizeResult], *, gpus: int, min_busbw: float | None,
          min_source: str) -> CheckResult:
    """Pass when every value was right and busbw at the largest size meets the pass mark."""
    from nodetune.measure.sweep import human_bytes  # only where a sweep was measured

    if not sizes:
        return failed(NAME, "no sizes measured", "a measured sweep", min_source,
                      "the all_reduce reported no size")
    wrong = [s for s in sizes if s.wrong]
    last = max(sizes, key=lambda s: s.bytes)
    measured = f"{last.busbw:.1f} GB/s busbw at {human_bytes(last.bytes)} ({gpus} GPUs)"
    expected = (f">= {min_busbw:g} GB/s at the largest size" if min_busbw is not None
                else "no wrong values")
    if wrong:
        return failed(NAME, measured, expected, min_source,
                      f"{sum(s.wrong for s in wrong)} wrong value(s) at "
                      + ", ".join(human_bytes(s.bytes) for s in wrong))
    if min_busbw is None:
        return warned(NAME, measured, expected, min_source,
                      f"no pass mark for this node; set {VAR_MIN} or {VAR_PROFILE}")
    if last.busbw < min_busbw:
        return failed(NAME, measured, expected, min_source,
                      f"busbw {last.busbw:.1f} GB/s at {human_bytes(last.bytes)} is under "
                      f"{min_busbw:g} GB/s")
    return passed(NAME, measured, expected, min_source)


def not_applicable(gpus: int) -> CheckResult | None:
    """A skip for nodes where a one-node all_reduce means nothing."""
    if gpus < 2:
        return skipped(NAME, "fewer than 2 GPUs" if gpus else "fewer than 2 GPUs (no GPU)")
    return None
