"""``node.pcie_aer``: PCIe Advanced Error Reporting counters of the GPUs', the HCAs' and
the bridges above them, since the node's previous check.

One check for the node, not per GPU: the functions span GPUs, HCAs and the bridges
between them, and an error on a link may be counted at either end (hence ``node.``, not
``gpu.`` or ``fabric.``). The message names each function and what it is.

Counters: ``/sys/bus/pci/devices/F/aer_dev_correctable``, ``aer_dev_nonfatal``,
``aer_dev_fatal``: lines ``NAME COUNT`` then ``TOTAL_ERR_COR N``/``TOTAL_ERR_NONFATAL N``/
``TOTAL_ERR_FATAL N``; they count since the device was enumerated (boot), and "may
increment at its link partner (e.g. root port)" rather than at the faulty endpoint
(Linux Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats, renamed
sysfs-bus-pci-devices-aer in 6.16; Documentation/PCI/pcieaer-howto.rst "AER Statistics /
Counters"; names as drivers/pci/pcie/aer.c prints them; read 2026-11-29).

Since the previous check: any new non-fatal or fatal (uncorrectable) error fails; new
correctable errors warn above ``nodetune_pcie_aer_correctable_per_hour`` per function
(default 60: a link correcting errors about once a minute, not the odd one; no vendor
publishes a limit), over a window of at least an hour (so one error between two checks a
minute apart is not 60 an hour). The correctable count is taken from a baseline that is
kept until it is an hour old (``pcie_aer_window`` in the state the next check reads), not
from each check: a health check every 5 minutes would otherwise hold 5 minutes' errors to
an hour's limit. A total lower than before (a reboot, a reset, the device
enumerated again) restarts the count: all of it came after the previous check, so it is
the increase. Without a previous check the totals since boot are reported: non-fatal or
fatal ones warn (no previous check dates them), the rest pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "node.pcie_aer"
# Its keys of health[NODE] (what the next check counts from): the counters, then the
# correctable baseline (next_window).
KEEPS = ("pcie_aer", "pcie_aer_window")
HELP: HelpLines = ()  # no line in check's --help yet
RATE_VAR = "nodetune_pcie_aer_correctable_per_hour"
DEFAULT_PER_HOUR = 60
SOURCE = ("kernel AER counters aer_dev_{correctable,nonfatal,fatal} (Documentation/ABI/testing/"
          "sysfs-bus-pci-devices-aer_stats, PCI/pcieaer-howto.rst, read 2026-11-29)")
KINDS = (("correctable", "TOTAL_ERR_COR"), ("nonfatal", "TOTAL_ERR_NONFATAL"),
         ("fatal", "TOTAL_ERR_FATAL"))
UNCORRECTABLE = ("nonfatal", "fatal")
_COUNT = re.compile(r"[0-9]{1,20}")  # a u64 counter in decimal; anything else is not read


def parse(text: object) -> tuple[int | None, dict[str, int]]:
    """(the TOTAL_ERR_* line's count, the other non-zero ``NAME COUNT`` lines)."""
    total, named = None, {}
    for line in str(text or "").splitlines():
        name, _, count = line.strip().rpartition(" ")
        if not name or not _COUNT.fullmatch(count):
            continue
        if name.startswith("TOTAL_ERR_"):
            total = int(count)
        elif int(count):
            named[name] = int(count)
    return total, named


def counters_of(pcie: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """``{0000:18:00.0: {correctable: 2, nonfatal: 0, fatal: 0}}`` for each function that
    has the counters (what the next check counts from)."""
    out: dict[str, dict[str, int]] = {}
    for f in _functions(pcie):
        aer = _aer(f)
        values = {}
        for kind, _total in KINDS:
            count, _ = parse(aer.get(kind))
            if count is not None:
                values[kind] = count
        if values:
            out[str(f.get("pci"))] = values
    return out


def _functions(pcie: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    found = (pcie or {}).get("functions")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _aer(f: Mapping[str, Any]) -> Mapping[str, Any]:
    raw = f.get("aer")
    return raw if isinstance(raw, dict) else {}


def _label(f: Mapping[str, Any]) -> str:
    raw = f.get("roles")
    roles = [str(r) for r in raw] if isinstance(raw, list) else []
    return f"{f.get('pci')} ({', '.join(roles)})" if roles else str(f.get("pci"))


def _names(f: Mapping[str, Any], kind: str) -> str:
    named = parse(_aer(f).get(kind))[1]
    return f" [{', '.join(f'{k} {v}' for k, v in named.items())}]" if named else ""


WINDOW_S = 3600.0  # the correctable baseline is kept until it is this old


def _window_base(window: Mapping[str, Any] | None
                 ) -> tuple[float, Mapping[str, int]] | None:
    """(since, {function: correctable}) of a kept window (None: none, or not readable)."""
    if not isinstance(window, dict) or not isinstance(window.get("since"), int | float):
        return None
    counts = window.get("correctable")
    if not isinstance(counts, dict):
        return None
    return float(window["since"]), {str(a): v for a, v in counts.items()
                                    if isinstance(v, int) and not isinstance(v, bool)}


def next_window(counts: Mapping[str, Mapping[str, int]], window: Mapping[str, Any] | None,
                now: float) -> dict[str, Any]:
    """The correctable baseline the next check counts from: ``window`` kept while it is
    younger than :data:`WINDOW_S` and no counter went below it (a reset), else this
    check's counts (:func:`counters_of`) from ``now``."""
    current = {a: c["correctable"] for a, c in counts.items() if "correctable" in c}
    base = _window_base(window)
    if base is not None and now - base[0] < WINDOW_S and all(
            current.get(a, 0) >= v for a, v in base[1].items()):
        return {"since": base[0], "correctable": {**current, **base[1]}}
    return {"since": now, "correctable": current}


def judge(pcie: Mapping[str, Any] | None, previous: Mapping[str, Mapping[str, int]] | None,
          previous_time: float | None, previous_what: str, now: float, *,
          per_hour: int = DEFAULT_PER_HOUR, window: Mapping[str, Any] | None = None,
          counters: Mapping[str, Mapping[str, int]] | None = None,
          min_hours: float = 1.0) -> CheckResult:
    """The node's AER counters against its previous check; correctable ones against the
    kept baseline ``window`` (:func:`next_window`) where there is one.

    ``min_hours``: the shortest span the correctable limit (``per_hour``) is scaled to: an
    hour between checks; a sampling window passes 0, so 59 errors in 10 s are not "under
    60 an hour".

    ``counters``: :func:`counters_of` ``pcie``, where the caller has them already (the
    files are parsed once per check); None: read here.
    """
    functions = _functions(pcie)
    if not functions:
        return skipped(NAME, "no GPU or RDMA device on the PCI bus", source=SOURCE)
    now_counts = counters_of(pcie) if counters is None else counters
    if not now_counts:
        return skipped(NAME, f"no aer_dev_* counters on the {len(functions)} PCI functions of "
                       "the GPUs and HCAs (a virtual machine or container, AER not enabled, "
                       "or a kernel before 4.19)", source=SOURCE)
    base = _window_base(window)
    since = base[0] if base is not None else previous_time
    hours = max(min_hours, (now - since) / 3600) if since else 1.0
    limit = per_hour * hours
    expected = (f"no new non-fatal/fatal; correctable <= {per_hour}/h per function"
                + (f" since {previous_what}" if previous is not None else ""))
    fails, warns, rises, first = [], [], [], []
    by_addr = {str(f.get("pci")): f for f in functions}
    for addr, counts in now_counts.items():
        f = by_addr[addr]
        before = (previous or {}).get(addr) if previous is not None else None
        if before is None:
            new_uncorr = [f"{k} {counts[k]}{_names(f, k)}" for k in UNCORRECTABLE
                          if counts.get(k)]
            if new_uncorr:
                first.append(f"{_label(f)}: {', '.join(new_uncorr)} since boot")
            continue
        # a total below the previous one: the counters restarted (reset, reboot), and
        # every kind's whole count came after the previous check
        restarted = any(v < before.get(k, 0) for k, v in counts.items())
        delta = dict(counts) if restarted else {k: v - before.get(k, 0)
                                                for k, v in counts.items()}
        grew = [f"{k} +{d}" for k, d in delta.items() if d]
        if grew:
            rises.append(f"{addr} {', '.join(grew)}" + (" (counters restarted)" if restarted
                                                         else ""))
        bad = [f"{k} +{delta[k]}{_names(f, k)}" for k in UNCORRECTABLE if delta.get(k)]
        if bad:
            fails.append(f"{_label(f)}: {', '.join(bad)}")
        elif (cor := _correctable(counts, delta, base, addr)) > limit:
            span = f"{hours:.1f} h" if hours >= 0.1 else f"{hours * 3600:.0f} s"
            warns.append(f"{_label(f)}: correctable +{cor}"
                         f"{_names(f, 'correctable')} in {span}, over {per_hour}/h")
    if previous is None:
        totals = {k: sum(c.get(k, 0) for c in now_counts.values()) for k, _ in KINDS}
        measured = (", ".join(f"{k} {v}" for k, v in totals.items()) +
                    f" since boot on {len(now_counts)} functions (no previous check)")
        if first:
            return warned(NAME, measured, expected, SOURCE, "uncorrectable PCIe errors since "
                          "boot, no previous check to date them: " + "; ".join(first))
        return passed(NAME, measured, expected, SOURCE, "no previous check: totals since boot")
    measured = (f"since {previous_what}: " + ("; ".join(rises) if rises else
                                              f"no new errors on {len(now_counts)} functions"))
    extra = [f"not in {previous_what}, uncorrectable since boot: {'; '.join(first)}"] \
        if first else []
    if fails:
        return failed(NAME, measured, expected, SOURCE, "; ".join([
            f"uncorrectable PCIe errors since {previous_what}: " + "; ".join(fails), *extra]))
    if warns or first:
        return warned(NAME, measured, expected, SOURCE, "; ".join(warns + extra))
    return passed(NAME, measured, expected, SOURCE)


def _correctable(counts: Mapping[str, int], delta: Mapping[str, int],
                 base: tuple[float, Mapping[str, int]] | None, addr: str) -> int:
    """New correctable errors of one function: since the kept baseline where it has the
    function and nothing went below it, else since the previous check."""
    now = counts.get("correctable", 0)
    if base is not None and addr in base[1] and now >= base[1][addr]:
        return now - base[1][addr]
    return delta.get("correctable", 0)


def previous_counters(doc: object) -> dict[str, dict[str, int]] | None:
    """The ``pcie_aer`` counters a previous check kept (None: none kept, or not readable)."""
    if not isinstance(doc, dict):
        return None
    out: dict[str, dict[str, int]] = {}
    for addr, counts in doc.items():
        if isinstance(counts, dict):
            out[str(addr)] = {str(k): v for k, v in counts.items()
                              if isinstance(v, int) and not isinstance(v, bool)}
    return out


def judge_signal(read: SignalRead) -> Judged:
    """node.pcie_aer from the reader's PCI answer, since the previous check that kept the
    counters and against its correctable baseline; this check's counters and baseline for
    the next one (the files parsed once for all three)."""
    kept = read.previous.of(NAME)
    counts = counters_of(read.pcie)
    window = kept.state.get(KEEPS[1])
    result = judge(read.pcie, previous_counters(kept.state.get(KEEPS[0])), kept.time,
                   kept.what, read.now, per_hour=read.inp.aer_per_hour, window=window,
                   counters=counts)
    return Judged((result,), {KEEPS[0]: counts,
                              KEEPS[1]: next_window(counts, window, read.now)})
