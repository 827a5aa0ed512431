"""``gpu.nvlink_errors[N]``: each GPU's NVLink error counters, per link, since the node's
previous check (a rate, not a lifetime total).

Counters: ``nvidia-smi nvlink -e`` (``--errorcounters``), one block per GPU::

    GPU 0: NVIDIA H200 (UUID: GPU-...)
         Link 0: Replay Errors: 0
         Link 0: Recovery Errors: 0
         Link 0: CRC Errors: 0

as driver 580.159.04 prints it on an H200 (tests/fixtures/check/h200-x2); it prints nothing
on a GPU without NVLink (tests/fixtures/check/README: the 1xH200 machine). NVML's
``nvmlDeviceGetNvLinkErrorCounter`` names the counters NVML_NVLINK_ERROR_DL_REPLAY,
_DL_RECOVERY, _DL_CRC_FLIT and _DL_CRC_DATA (https://docs.nvidia.com/deploy/nvml-api/
group__NvLink.html, read 2026-11-29); an older nvidia-smi prints the CRC counter as
``CRC FLIT Errors`` and ``CRC Data Errors``, read here as their own counters. A value that
is not a number (``N/A``) is left out. The counters run from the driver's load or
``nvidia-smi nvlink -re``.

Limits: DCGM's NVLink health watch (github.com/NVIDIA/DCGM modules/health/
DcgmHealthWatch.cpp ``MonitorNVLink`` and dcgmlib/src/DcgmGpuHardwareLimits.h, read
2026-11-29): a replay or recovery error (``DCGM_LIMIT_MAX_NVLINK_ERROR`` 1) fails
(``DCGM_FR_NVLINK_ERROR_CRITICAL``); CRC errors warn, and fail at a rate of 100 a second or
more (``DCGM_LIMIT_MAX_NVLINK_CRC_ERROR``, "CRC errors only matter at rates of 100+ per
second"), here ``nodetune_nvlink_crc_errors_per_s``. A counter lower than before (a
reboot, a driver reload, a reset of the counters) restarts the count: its whole value came
after the previous check. Without a previous check the totals are reported: replay or
recovery errors warn (nothing dates them), the rest pass, and the next check counts from
these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "gpu.nvlink_errors"
# Its keys of health[NODE] (what the next check counts from): the links' counters.
KEEPS = ("nvlink_errors",)
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.nvlink_errors[N]",
     "per link since the node's previous check: no new replay/recovery",
     "error, CRC < nodetune_nvlink_crc_errors_per_s (default 100/s; fewer warn)",
     "(DCGM's NVLink health limits); no NVLink: skip"),
)
RATE_VAR = "nodetune_nvlink_crc_errors_per_s"
DEFAULT_CRC_PER_S = 100.0
SOURCE = ("nvidia-smi nvlink -e; DCGM NVLink health limits (NVIDIA/DCGM DcgmHealthWatch.cpp, "
          "DcgmGpuHardwareLimits.h, read 2026-11-29)")
FATAL = ("replay", "recovery")  # any rise fails (DCGM_FR_NVLINK_ERROR_CRITICAL)
_GPU = re.compile(r"^GPU (\d{1,4}):")
_COUNTER = re.compile(r"^\s*Link (\d{1,3}): ([A-Za-z][A-Za-z ]{0,40}?) Errors: (\S+)\s*$")
_KEY = re.compile(r"^(\d{1,4})/(\d{1,3})$")


def parse(text: object) -> dict[int, dict[int, dict[str, int]]]:
    """``nvidia-smi nvlink -e`` -> {GPU index: {link: {replay: 0, recovery: 0, crc: 0}}}."""
    out: dict[int, dict[int, dict[str, int]]] = {}
    current: int | None = None
    for line in str(text or "").splitlines():
        if m := _GPU.match(line):
            current = int(m[1])
            out[current] = {}
        elif (m := _COUNTER.match(line)) and current is not None and m[3].isdigit():
            name = m[2].strip().lower().replace(" ", "_")
            out[current].setdefault(int(m[1]), {})[name] = int(m[3])
    return {g: links for g, links in out.items() if links}


def counters_of(nvidia: Mapping[str, Any]) -> dict[str, dict[str, int]] | None:
    """``{"0/3": {replay: 0, ...}}`` (GPU/link) for the next check; None: not read."""
    res = nvidia.get("nvlink_errors")
    if not isinstance(res, dict) or res.get("rc") != 0:
        return None
    return {f"{g}/{n}": c for g, links in parse(res.get("stdout")).items()
            for n, c in links.items()}


def previous_counters(doc: object) -> dict[str, dict[str, int]] | None:
    """The counters a previous check kept (None: none kept, or not readable)."""
    if not isinstance(doc, dict):
        return None
    return {str(k): {str(n): v for n, v in c.items()
                     if isinstance(v, int) and not isinstance(v, bool)}
            for k, c in doc.items() if _KEY.match(str(k)) and isinstance(c, dict)}


def unread(nvidia: Mapping[str, Any], when: str = "") -> str | None:
    """Why the counters were not read (None: they were); ``when`` names the reading that
    failed (``" at the window's start"``: check --sample reads them twice)."""
    if not nvidia.get("tool"):
        return "no nvidia-smi on the node"
    res = nvidia.get("nvlink_errors")
    if not isinstance(res, dict):
        return ("neither NVML nor nvidia-smi -q -x gave GPU data, so nvidia-smi nvlink -e was "
                "not run")
    if res.get("rc") != 0:
        detail = str(res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        return (f"nvidia-smi nvlink -e failed{when} (exit {res.get('rc')}"
                f"{': ' + detail[-1][:200] if detail else ''})")
    return None


def judge(nvidia: Mapping[str, Any], previous: Mapping[str, Mapping[str, int]] | None,
          previous_time: float | None, previous_what: str, now: float, *,
          crc_per_s: float = DEFAULT_CRC_PER_S) -> list[CheckResult]:
    """One result per GPU with NVLink: its links' counters against the previous check."""
    res = nvidia.get("nvlink_errors")
    if isinstance(res, dict) and res.get("unknown"):  # hung or crashed: not assessed
        return [unknown(NAME, f"nvidia-smi nvlink -e: {res['unknown']}", source=SOURCE)]
    why = unread(nvidia)
    if why:
        return [skipped(NAME, why, source=SOURCE)]
    res = nvidia["nvlink_errors"]
    gpus = parse(res.get("stdout"))
    if not gpus:
        return [skipped(NAME, "no NVLink on these GPUs (nvidia-smi nvlink -e lists no link)",
                        source=SOURCE)]
    seconds = max(1.0, now - previous_time) if previous_time is not None else None
    expected = (f"no new replay/recovery errors, CRC errors < {crc_per_s:g}/s per link"
                + (f" since {previous_what}" if previous is not None else ""))
    return [_judge_gpu(g, links, previous, seconds, previous_what, expected, crc_per_s)
            for g, links in sorted(gpus.items())]


def _judge_gpu(gpu: int, links: Mapping[int, Mapping[str, int]],
               previous: Mapping[str, Mapping[str, int]] | None, seconds: float | None,
               previous_what: str, expected: str, crc_per_s: float) -> CheckResult:
    name = f"{NAME}[{gpu}]"
    totals = {k: sum(c.get(k, 0) for c in links.values())
              for k in sorted({k for c in links.values() for k in c})}
    total_words = ", ".join(f"{k} {v}" for k, v in totals.items())
    befores = [(n, c, (previous or {}).get(f"{gpu}/{n}")) for n, c in sorted(links.items())]
    if previous is None or seconds is None or all(b is None for _, _, b in befores):
        measured = f"{total_words} on {len(links)} links (no previous check: the totals)"
        bad = [f"link {n} {k} {c[k]}" for n, c in sorted(links.items()) for k in FATAL
               if c.get(k)]
        if bad:
            return warned(name, measured, expected, SOURCE, f"GPU {gpu}: replay/recovery "
                          "errors since the counters started, no previous check to date "
                          "them: " + ", ".join(bad))
        return passed(name, measured, expected, SOURCE, "no previous check: the next one "
                      "counts from these")
    fails, warns, rises = [], [], []
    for n, counts, before in befores:
        if before is None:
            continue
        # a counter below the previous one: the counters restarted (reboot, driver reload,
        # nvidia-smi nvlink -re), and its whole value came after the previous check
        restarted = any(v < before.get(k, 0) for k, v in counts.items())
        delta = dict(counts) if restarted else {k: v - before.get(k, 0)
                                                for k, v in counts.items()}
        grew = {k: d for k, d in delta.items() if d > 0}
        if not grew:
            continue
        rises.append(f"link {n} " + ", ".join(f"{k} +{d}" for k, d in grew.items())
                     + (" (counters restarted)" if restarted else ""))
        fatal = [f"{k} +{grew[k]}" for k in FATAL if k in grew]
        crc = sum(d for k, d in grew.items() if k not in FATAL)
        if fatal:
            fails.append(f"link {n} {', '.join(fatal)}")
        if crc and crc / seconds >= crc_per_s:
            fails.append(f"link {n} CRC {crc / seconds:.1f}/s >= {crc_per_s:g}/s")
        elif crc:
            warns.append(f"link {n} CRC +{crc} in {seconds:.0f} s")
    measured = (f"since {previous_what}: " + ("; ".join(rises) if rises else
                                              f"no new errors on {len(links)} links"))
    if fails:
        return failed(name, measured, expected, SOURCE, f"GPU {gpu}: NVLink errors since "
                      f"{previous_what}: " + "; ".join(fails + warns) + " (DCGM's health "
                      "watch fails any replay or recovery error)")
    if warns:
        return warned(name, measured, expected, SOURCE, f"GPU {gpu}: NVLink CRC errors "
                      f"since {previous_what}, under {crc_per_s:g}/s: " + "; ".join(warns))
    return passed(name, measured, expected, SOURCE)


def judge_signal(read: SignalRead) -> Judged:
    """gpu.nvlink_errors from the probe's nvidia-smi nvlink -e, since the previous check
    that kept the counters; this check's counters for the next one."""
    kept = read.previous.of(NAME)
    return Judged(tuple(judge(read.nvidia, previous_counters(kept.state.get(KEEPS[0])),
                              kept.time, kept.what, read.now,
                              crc_per_s=read.inp.nvlink_crc_per_s)),
                  {KEEPS[0]: counters_of(read.nvidia)})
