"""``node.time_sync``: the node's clock offset from chrony or systemd-timesyncd.

Log correlation across nodes and NCCL's timeouts assume clocks that agree; a node more
than ``nodetune_max_clock_offset_ms`` (default 100 ms) off fails, a clock that no source
synchronises warns, and a node with neither chronyc nor timedatectl is skipped.

Formats, from the tools' own documentation and source (read 2026-11-29):

- chrony: ``chronyc -c tracking`` prints the tracking report as one CSV line ("-c: reports
  in a comma-separated values (CSV) format ... time printed as number of seconds since the
  epoch and values in seconds not converted to other units"), its 14 fields in the text
  report's order: Reference ID, name or address, Stratum, Ref time, System time, Last
  offset, RMS offset, Frequency, Residual freq, Skew, Root delay, Root dispersion, Update
  interval, Leap status. System time is signed in CSV: positive where the text form says
  ``System time : 0.000006523 seconds slow of NTP time``. Leap status ``Not synchronised``
  (Reference ID 00000000, stratum 0) means no source. chronyc(1), doc/chronyc.adoc
  (options, ``tracking``), and client.c ``process_cmd_tracking``/``print_report`` (the
  ``%O`` field printed raw with 9 decimals in CSV mode; ``506 Cannot talk to daemon`` when
  chronyd does not answer) of https://github.com/mlichvar/chrony.
- systemd: ``timedatectl show`` prints org.freedesktop.timedate1's properties as
  ``NAME=value`` (``NTP`` and ``NTPSynchronized``: yes|no; org.freedesktop.timedate1(5),
  https://man7.org/linux/man-pages/man5/org.freedesktop.timedate1.5.html);
  ``timedatectl timesync-status`` prints systemd-timesyncd's last exchange as ``Field:
  value`` lines: ``Server: ADDR (NAME)``, ``Leap: normal``, ``Offset: +4.523ms`` (a
  systemd time span, ``+`` when the server is ahead, i.e. the local clock is behind:
  t = ((T2 - T1) + (T3 - T4)) / 2), and only ``Packet count: 0`` before the first answer.
  timedatectl(1), https://www.freedesktop.org/software/systemd/man/250/timedatectl.html,
  and src/timedate/timedatectl.c ``print_ntp_status_info`` of
  https://github.com/systemd/systemd.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.expect import Expectations
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.probe_parse import Probe, run_result

NAME = "node.time_sync"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("node.time_sync",
     "clock offset from chrony (chronyc -n -c tracking) or systemd-timesyncd",
     "(timedatectl timesync-status) <= nodetune_max_clock_offset_ms (default",
     "100 ms); not synchronised warns; neither tool: skip"),
)
CHRONY_FIELDS = 14
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(y|month|w|d|h|min|ms|us|µs|ns|s)(?![a-z])")
_UNIT = {"y": 31557600.0, "month": 2629800.0, "w": 604800.0, "d": 86400.0, "h": 3600.0,
         "min": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def section(probe: Probe) -> dict[str, Any]:
    """node_host.time_sync's answer (the probe's ``time_sync``): tool paths and each run's
    (rc, stdout, stderr), checked for type and size."""
    doc = probe.section("time_sync")
    out: dict[str, Any] = {k: str(doc[k])[:300] if doc.get(k) else None
                           for k in ("chronyc", "timedatectl")}
    for key in ("chrony", "chrony_text", "show", "timesync"):
        if (res := run_result(doc.get(key))) is not None:
            out[key] = res
    return out


def judge_probe(probe: Probe, exp: Expectations, gpus: GpuRead) -> list[CheckResult]:
    """The node's clock, as the probe read it, against ``nodetune_max_clock_offset_ms``."""
    return [judge(section(probe), exp.max_offset_ms, exp.max_offset_source)]


def chrony_csv(text: str) -> dict[str, Any] | None:
    """``chronyc -c tracking``'s line: source, stratum, slow (s, + = behind NTP), leap."""
    for line in text.splitlines():
        fields = line.strip().split(",")
        if len(fields) == CHRONY_FIELDS:
            try:
                slow = float(fields[4])
                if not math.isfinite(slow):
                    return None
                return {"source": fields[1] or fields[0], "stratum": int(fields[2]),
                        "slow": slow, "leap": fields[13]}
            except ValueError:
                return None
    return None


def chrony_text(text: str) -> dict[str, Any] | None:
    """``chronyc tracking``'s report, read into :func:`chrony_csv`'s form."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    m = re.match(r"^([0-9]{1,12}(?:\.[0-9]{1,12})?) seconds (slow|fast) of NTP time",
                 fields.get("System time", ""))
    ref = re.match(r"^(\S+)\s*\((.*)\)", fields.get("Reference ID", ""))
    if not m or not ref or not fields.get("Stratum", "").isdigit():
        return None
    return {"source": ref[2] or ref[1], "stratum": int(fields["Stratum"]),
            "slow": float(m[1]) * (1 if m[2] == "slow" else -1),
            "leap": fields.get("Leap status", "")}


def timespan(text: str) -> float | None:
    """A signed systemd time span (``+4.523ms``, ``-1min 2.5s``) in seconds."""
    text = text.strip()
    parts = _SPAN.findall(text)
    if not parts:
        return 0.0 if text.lstrip("+-") == "0" else None
    total = sum(float(n) * _UNIT[u] for n, u in parts)
    if not math.isfinite(total):
        return None
    return -total if text.startswith("-") else total


def _fields(text: str, sep: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:+.3f} ms"


def judge(ts: Mapping[str, Any], limit_ms: float, source: str) -> CheckResult:
    """The clock offset against ``limit_ms``: chrony's where it answers, else timesyncd's."""
    expected = f"|offset| <= {limit_ms:g} ms, synchronised"
    if not ts.get("chronyc") and not ts.get("timedatectl"):
        return skipped(NAME, "neither chronyc (chrony) nor timedatectl (systemd) is on the "
                       "node's PATH: no time sync state to read", expected=expected,
                       source=source)
    problems = []
    for key, parse in (("chrony", chrony_csv), ("chrony_text", chrony_text)):
        res = ts.get(key) or {}
        found = parse(str(res.get("stdout", ""))) if res.get("rc") == 0 else None
        if found is not None:
            return _judge_chrony(found, limit_ms, expected, source)
        if res:
            detail = str(res.get("stdout") or res.get("stderr") or "no output").strip()
            problems.append(f"chronyc: {detail.splitlines()[-1][:200] if detail else '?'}")
    show, status = ts.get("show") or {}, ts.get("timesync") or {}
    if show.get("rc") == 0:
        return _judge_timesyncd(_fields(str(show.get("stdout", "")), "="), status, limit_ms,
                                expected, source, problems)
    if show:
        detail = str(show.get("stderr") or show.get("stdout") or "no output").strip()
        problems.append(f"timedatectl show: {detail.splitlines()[-1][:200] if detail else '?'}")
    hung = [str(r["unknown"]) for k in ("chrony", "chrony_text", "show")
            if (r := ts.get(k) or {}).get("unknown")]
    if hung:  # a time tool hung or crashed: not assessed, not a warning about the clock
        return unknown(NAME, "could not be assessed: " + "; ".join(hung), expected=expected,
                       source=source)
    return warned(NAME, "unknown", expected, source,
                  "the time sync state could not be read (" + "; ".join(problems) + ")")


def _judge_chrony(found: Mapping[str, Any], limit_ms: float, expected: str,
                  source: str) -> CheckResult:
    slow = float(found["slow"])
    where = "slow" if slow > 0 else "fast"
    measured = f"{abs(slow) * 1000:.3f} ms {where} (chrony, {found['source']}, stratum " \
               f"{found['stratum']})"
    if found["leap"] == "Not synchronised" or found["stratum"] == 0:
        return warned(NAME, "not synchronised (chrony)", expected, source,
                      "chronyd has no source it synchronises to (Leap status "
                      f"{found['leap'] or '?'}): check `chronyc sources` and the NTP servers "
                      "the node can reach")
    if abs(slow) * 1000 > limit_ms:
        return failed(NAME, measured, expected, source,
                      f"the clock is {abs(slow) * 1000:.1f} ms {where} of NTP time (limit "
                      f"{limit_ms:g} ms): logs do not line up across nodes and NCCL's timeouts "
                      "misjudge; check chronyd (`chronyc sources`, `chronyc makestep`)")
    return passed(NAME, measured, expected, source)


def _judge_timesyncd(show: Mapping[str, str], status: Mapping[str, Any], limit_ms: float,
                     expected: str, source: str, problems: list[str]) -> CheckResult:
    synced, ntp = show.get("NTPSynchronized"), show.get("NTP")
    if synced != "yes":
        why = ("no time sync service is enabled (timedatectl: NTP=" + str(ntp) + ")"
               if ntp != "yes" else "the time sync service has not synchronised the clock")
        return warned(NAME, f"not synchronised (NTPSynchronized={synced or '?'})", expected,
                      source, f"{why}; enable chrony or systemd-timesyncd with a reachable "
                      "NTP server" + (f" ({'; '.join(problems)})" if problems else ""))
    lines = _fields(str(status.get("stdout", "")), ":") if status.get("rc") == 0 else {}
    offset = timespan(lines["Offset"]) if "Offset" in lines else None
    if offset is None:
        return warned(NAME, "synchronised, offset not reported", expected, source,
                      "the kernel marks the clock synchronised (NTPSynchronized=yes), but "
                      "neither chronyc nor systemd-timesyncd reports an offset to hold to the "
                      f"limit ({'; '.join(problems) or 'timesync-status gave no Offset'})")
    measured = f"{_ms(-offset)} (systemd-timesyncd, {lines.get('Server', '?')})"
    if abs(offset) * 1000 > limit_ms:
        behind = "behind" if offset > 0 else "ahead of"
        return failed(NAME, measured, expected, source,
                      f"the clock is {abs(offset) * 1000:.1f} ms {behind} its NTP server "
                      f"(limit {limit_ms:g} ms): logs do not line up across nodes and NCCL's "
                      "timeouts misjudge; check `timedatectl timesync-status`")
    return passed(NAME, measured, expected, source)
