"""``check --sample DURATION``: a node's time-varying signals read once a second over a window
(:mod:`nodetune.check.node_sample`) and judged as rates and flaps over it, as GPUd and
NVSentinel judge them continuously, where a single reading sees only one instant:

- ``gpu.slowdown[N]``: the share of the sampled seconds in which the GPU's clocks were cut by
  the hardware (NVML's clock event reasons HW slowdown 0x8, HW thermal slowdown 0x40, HW
  power brake slowdown 0x80: nvml.h, NVML 13.3.29 as github.com/NVIDIA/go-nvml gen/nvml/
  nvml.h carries it, read 2026-11-30: each "reducing the core clocks by a factor of 2 or
  more"). At 0.6 or more it fails: GPUd's HW-slowdown rule (github.com/leptonai/gpud
  components/accelerator/nvidia/hw-slowdown/component.go, read 2026-11-30: unhealthy when
  slowdown events are seen in 0.6 of the minutes of its 10-minute window, "to avoid false
  positives when the HW slowdown events are rare"; it asks for a hardware inspection), here
  over seconds. Fewer seconds warn (nvml.h: HW slowdown "may be also reported during PState
  or clock change"), as does SW thermal slowdown (0x20) in any second, as gpu.clocks does.
  Power draw min/median/max and SW power cap seconds (0x4) are reported, not judged.
- ``pcie.flap[DEV]``, ``fabric.rdma_window[D/P]``, ``node.pcie_aer_window``,
  ``gpu.nvlink_window[N]``: :mod:`nodetune.check.sample_links`.

A node whose sampler could not run, hung or answered in another shape has each of these
``unknown``, never a pass; its other checks stand.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from nodetune.check import node_program, sample_links
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.sample_smi import BUS, Series, parse_smi
from nodetune.errors import ExitCode, InputError, NodetuneError
from nodetune.measure.node_inputs import HealthInputs
from nodetune.remote.executor import NodeRunner

OPTION = "--sample"
MIN_S, MAX_S = 1.0, 600.0
MARGIN_S = 25.0  # past the window and the two nvlink -e' timeouts: 2 x 5 s to reap them,
#                  12 s to stop nvidia-smi, 3 s to answer (node_sample's bound)
NAME = "gpu.slowdown"
NAMES = (NAME, *sample_links.NAMES)
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.slowdown[N]",
     "HW slowdown/thermal/power brake in < 60% of the samples (GPUd's rule; any",
     "warns), with power draw min/median/max"),
    *sample_links.HELP,
)
SOURCE = ("nvidia-smi --query-gpu=clocks_event_reasons.active -lms 1000 (NVML clock event "
          "reasons, nvml.h); GPUd's HW-slowdown rule (leptonai/gpud hw-slowdown, read "
          "2026-11-30)")
FAIL_FRACTION = 0.6  # GPUd DefaultStateHWSlowdownEventsThresholdFrequencyPerMinute
# Fewer samples than this never fail: one HW-slowdown second of a 1 s window is not a share
# (GPUd judges 0.6 over ten minutes; NVML sets the bit during P-state changes too).
MIN_FAIL_SAMPLES = 5
HW_BITS = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
SW_THERMAL, SW_POWER_CAP = 0x20, 0x4
_DURATION = re.compile(r"^([0-9]{1,6}(?:\.[0-9]{1,3})?)\s*(s|m|)$")


def seconds_of(text: str) -> float:
    """``10s``, ``2m`` or ``90`` (seconds) as seconds, within 1 s .. 10 min.

    Raises:
        InputError: anything else (names --sample).
    """
    m = _DURATION.match(str(text).strip().lower())
    if not m:
        raise InputError(f"{OPTION} {text!r}: expected a duration such as 10s or 2m")
    value = float(m[1]) * (60 if m[2] == "m" else 1)
    if not MIN_S <= value <= MAX_S:
        raise InputError(f"{OPTION} {text!r}: must be between {MIN_S:g} s and "
                         f"{MAX_S / 60:g} min")
    return value


def source() -> str:
    """The node-side sampler's source, run with ``python -c``; it carries
    :mod:`nodetune.check.node_run` (the runner its tools go through) and node_facts' fact
    script (which lists the RDMA ports, for the roles and the probe too)."""
    return node_program.embed("node_sample.py", FACT_SOURCE=node_program.fact_text())


def tool_timeout(timeout: float) -> float:
    """Each ``nvidia-smi nvlink -e``'s bound on the node."""
    return min(10.0, max(5.0, timeout / 4))


def read_node(node: NodeRunner, python: str, host: str, inp: HealthInputs, *,
              seconds: float, timeout: float) -> dict[str, Any]:
    """Run the sampler on the node for ``seconds`` (one command, nothing left there).

    Raises:
        LaunchError: its answer is not the sampler's.
        NodeTimeout: no answer within the window and its margin.
    """
    each = tool_timeout(timeout)
    request = {"seconds": seconds, "rdma_sysfs": inp.rdma_sysfs, "pci_sysfs": inp.pci_sysfs,
               "timeout": each}
    return node_program.run(node, python, source(), request,
                            timeout=seconds + 2 * each + MARGIN_S, mark="sample",
                            what="the sampler", host=host)


class Started:
    """A window being sampled on a node, in a thread of its own."""

    def __init__(self, work: Callable[[], tuple[list[CheckResult], dict[str, Any]]]) -> None:
        pool = ThreadPoolExecutor(max_workers=1)
        self._future = pool.submit(work)
        pool.shutdown(wait=False)  # the window ends by itself, bounded by read_node's wait

    def result(self) -> tuple[list[CheckResult], dict[str, Any]]:
        """Its checks and ``window[NODE].sample``, once the window is over."""
        return self._future.result()


def start(node: NodeRunner, python: str, host: str, inp: HealthInputs, *,
          seconds: float, timeout: float) -> Started:
    """Start sampling ``seconds`` on the node; a sampler that fails or hangs makes every
    sample check ``unknown`` (bad input is raised)."""
    def work() -> tuple[list[CheckResult], dict[str, Any]]:
        try:
            doc = read_node(node, python, host, inp, seconds=seconds, timeout=timeout)
        except NodetuneError as exc:
            if exc.exit_code == ExitCode.BAD_INPUT:
                raise
            return not_assessed(exc), {"asked_s": seconds, "error": exc.message}
        return judge(doc, inp)

    return Started(work)


def not_assessed(exc: NodetuneError) -> list[CheckResult]:
    """Every sample check ``unknown``: the sampler gave no answer (``exc`` says why)."""
    return [unknown(n, f"the {OPTION} window could not be read: {exc.message}")
            for n in NAMES]


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def _time(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def window(doc: Mapping[str, Any], gpus: Mapping[int, Series]) -> dict[str, Any]:
    """``report.json``'s ``window[NODE].sample``: when it started, how long, what it took."""
    start, end = _time(doc, "start"), _time(doc, "end")
    ticks = doc.get("ticks")
    return {"start": _stamp(start) if start is not None else None,
            "asked_s": _time(doc, "seconds"),
            "duration_s": round(end - start, 1) if start is not None and end is not None
            else None,
            "samples": ticks if isinstance(ticks, int) else 0,
            "gpu_samples": min((len(s.points) for s in gpus.values()), default=0)}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpu_reason(doc: Mapping[str, Any], gpus: Mapping[int, Series]) -> CheckResult | None:
    """Why no GPU sample is judged (a skip or an unknown), or None: there are samples."""
    on_bus = doc.get("gpus_on_bus") if isinstance(doc.get("gpus_on_bus"), int) else 0
    smi = _dict(doc.get("smi"))
    if not doc.get("tool"):
        return skipped(NAME, f"no nvidia-smi on the node ({on_bus} NVIDIA GPU(s) on the PCI "
                       "bus)" if on_bus else "no GPU", source=SOURCE)
    if smi.get("unknown"):
        return unknown(NAME, str(smi["unknown"])[:300], source=SOURCE)
    if gpus:
        return None
    said = [str(i[1]) for i in smi.get("lines") or [] if isinstance(i, list) and len(i) == 2]
    if not on_bus and not any(BUS.match(p.strip()) for s in said for p in s.split(",")):
        return skipped(NAME, "no GPU", source=SOURCE)
    return unknown(NAME, "nvidia-smi gave no sample in the window"
                   + (f": {said[0][:200]}" if said else " (it printed nothing)"),
                   source=SOURCE)


def judge_slowdown(series: Series, seconds: float) -> CheckResult:
    """One GPU's HW slowdown share over the window, with its power draw."""
    name = f"{NAME}[{series.index}]"
    if series.errors:  # the driver answered for this GPU with an error, not a value
        return unknown(name, f"GPU {series.index} ({series.pci}): nvidia-smi said "
                       f"{series.errors[0]} in {len(series.errors)} of {len(series.points)} "
                       "samples", source=SOURCE)
    read = [p for p in series.points if p.reasons is not None]
    if not read:
        return skipped(name, f"GPU {series.index} ({series.pci}) reports no clock event "
                       "reasons (N/A)", source=SOURCE)
    n = len(read)
    if n < max(1, int(seconds // 2)):  # nvidia-smi samples once a second: it stopped early
        return unknown(name, f"GPU {series.index} ({series.pci}): nvidia-smi gave {n} "
                       f"sample(s) in a {seconds:g} s window (it stopped or stalled)",
                       source=SOURCE)
    hw = sum(1 for p in read if p.reasons is not None and p.reasons & sum(HW_BITS))
    each = {w: sum(1 for p in read if p.reasons is not None and p.reasons & bit)
            for bit, w in HW_BITS.items()}
    sw = sum(1 for p in read if p.reasons is not None and p.reasons & SW_THERMAL)
    cap = sum(1 for p in read if p.reasons is not None and p.reasons & SW_POWER_CAP)
    watts = sorted(p.power for p in series.points if p.power is not None)
    mid = (watts[len(watts) // 2] + watts[(len(watts) - 1) // 2]) / 2 if watts else 0.0
    power = (f"; power {watts[0]:.0f}/{mid:.0f}/{watts[-1]:.0f} W "
             "min/median/max" if watts else "; power N/A")
    measured = (f"HW slowdown in {hw} of {n} samples ({hw / n:.0%}"
                + "".join(f", {w} {c}" for w, c in each.items() if c) + f") over {seconds:g} s"
                + (f", SW thermal {sw}" if sw else "") + (f", SW power cap {cap}" if cap else "")
                + power)
    expected = f"HW slowdown/thermal/power brake in < {FAIL_FRACTION:.0%} of the samples"
    label = f"GPU {series.index} ({series.pci})"
    if hw / n >= FAIL_FRACTION and n >= MIN_FAIL_SAMPLES:
        return failed(name, measured, expected, SOURCE, f"{label}: the hardware cut its clocks "
                      f"by half or more in {hw} of {n} samples (cooling or power supply: GPUd "
                      "asks for a hardware inspection)")
    if hw or sw:
        return warned(name, measured, expected, SOURCE, f"{label}: "
                      + (f"HW slowdown in {hw} of {n} samples, "
                         + (f"under GPUd's {FAIL_FRACTION:g}" if hw / n < FAIL_FRACTION else
                            f"too few samples to judge (fails from {MIN_FAIL_SAMPLES})")
                         + " (NVML also reports it during a P-state or clock change)"
                         if hw else "")
                      + ("; " if hw and sw else "")
                      + (f"SW thermal slowdown in {sw} of {n} samples" if sw else ""))
    return passed(name, measured, expected, SOURCE)


def judge(doc: Mapping[str, Any], inp: HealthInputs) -> tuple[list[CheckResult], dict[str, Any]]:
    """Every sample check of one node, and the window it covered (``window[NODE].sample``)."""
    smi = _dict(doc.get("smi"))
    gpus = parse_smi(smi)
    seconds = _time(doc, "seconds") or 0.0
    why = _gpu_reason(doc, gpus)
    out: list[CheckResult] = [why] if why else [
        judge_slowdown(s, seconds) for _, s in sorted(gpus.items())]
    on_bus = doc.get("gpus_on_bus")
    if not why and isinstance(on_bus, int) and on_bus > len(gpus):
        out.append(unknown(NAME, f"{on_bus} NVIDIA GPU(s) on the PCI bus, nvidia-smi sampled "
                           f"{len(gpus)}: the others were not assessed", source=SOURCE))
    out += sample_links.judge(doc, gpus, inp, what=_what(doc))
    return out, window(doc, gpus)


def _what(doc: Mapping[str, Any]) -> str:
    start = _time(doc, "start")
    return f"the start of the sampling window ({_stamp(start) if start else '?'})"


def words(window_doc: Mapping[str, Any]) -> list[str]:
    """The window a node's checks cover, in words: since its previous check (or none), and
    the sampled window where there was one."""
    out = []
    prev = window_doc.get("previous_check")
    if isinstance(prev, dict):
        out.append(f"counters since the previous check at {prev['at']}" if prev.get("at")
                   else "no previous check: counters since boot or the driver's load")
    s = window_doc.get("sample")
    if isinstance(s, dict) and s.get("error"):
        out.append(f"no sampled window ({s.get('asked_s'):g} s asked): {s['error']}")
    elif isinstance(s, dict):
        out.append(f"sampled {s.get('duration_s')} s from {s.get('start')}: "
                   f"{s.get('samples')} sysfs reads" + (
                       f", {s['gpu_samples']} nvidia-smi samples per GPU"
                       if s.get("gpu_samples") else ""))
    return out

