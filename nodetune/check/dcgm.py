"""``dcgm.diag``: NVIDIA DCGM's diagnostic (``dcgmi diag -r LEVEL -j``) where DCGM is
installed; every failed test named with DCGM's own message.

Levels (NVIDIA DCGM reference, "dcgmi diag", ``-r``,
https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html,
read 2026-11-26): 1 quick deployment checks, "normally lasting seconds"; 2 medium,
"approximately two minutes"; 3 long, "approximately 15 minutes"; 4 extended, longer.
``check`` runs level 1 unless ``--dcgm-level`` asks for more.

JSON, as ``dcgmi`` writes it (NVIDIA/DCGM dcgmi/Diag.cpp and
testing/python3/dcgm_diag_schema.json at tags v3.3.1 and v4.6.0, read 2026-11-26):

- DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_id": "1", "status", "warnings": [{"warning", "error_id",
  "error_category", "error_severity"}], "info": "..."}]}]}]}, "version", "Driver Version
  Detected", ...}``. The Deployment tests' results carry ``"warnings"`` as one string with
  ``error_id`` beside it, and a second error of such a test is a further result without
  a status.
- DCGM 4.x: the top key is ``"DCGM Diagnostic"``; results name ``entity_group``/
  ``entity_id``; ``info`` is a list; each test has a ``test_summary`` (status and the
  errors no entity owns); the version is ``metadata.version``.
- Either: a diagnostic that could not run is ``{"DCGM ...": {"runtime_error", "version"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "dcgm.diag"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("dcgm.diag",
     "dcgmi diag -r --dcgm-level -j: every test passes (skips without DCGM)"),
)
SOURCE = "NVIDIA DCGM dcgmi diag -j (NVIDIA/DCGM dcgmi/Diag.cpp v3.3/v4.6, 2026-11-26)"
LEVELS = (1, 2, 3, 4)
NOT_ASKED = "not asked for (--dcgm-level 0)"


def _body(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((v for k, v in doc.items() if k.startswith("DCGM") and isinstance(v, dict)),
                {})


def _rows(body: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(test, gpu, status, message) for every result of every test; a test whose summary
    failed while none of its results did gives one row for the node."""
    out: list[tuple[str, str, str, str]] = []
    for cat in body.get("test_categories") or []:
        for test in (cat or {}).get("tests") or []:
            if not isinstance(test, dict):
                continue
            name = str(test.get("name", "?"))
            mine: list[tuple[str, str, str, str]] = []
            for res in test.get("results") or []:
                if not isinstance(res, dict):
                    continue
                if "status" not in res and mine:  # 3.x: a further error of the last result
                    t, g, st, m = mine[-1]
                    mine[-1] = (t, g, st, " / ".join(x for x in (m, _words(res)) if x))
                    continue
                mine.append((name, _gpu(res), str(res.get("status", "")), _words(res)))
            summary = test.get("test_summary")
            if isinstance(summary, dict) and str(summary.get("status", "")).lower() == "fail" \
                    and not any(r[2].lower() == "fail" for r in mine):
                mine.append((name, "node", "Fail", _words(summary) or "no message"))
            out += mine
    return out


def _words(res: Mapping[str, Any]) -> str:
    warnings = res.get("warnings") or []
    if isinstance(warnings, (str, dict)):
        warnings = [warnings]
    text = [str(w.get("warning", "")) if isinstance(w, dict) else str(w) for w in warnings]
    text = [t.strip() for t in text if t and t.strip()]
    if not text and res.get("info"):
        info = res["info"]
        text = [str(i) for i in info] if isinstance(info, list) else [str(info)]
    return " / ".join(text)[:400]


def _gpu(res: Mapping[str, Any]) -> str:
    ids = res.get("gpu_id", res.get("gpu_ids", res.get("entity_id")))
    group = str(res.get("entity_group") or "GPU")
    return f"{group} {ids}" if ids not in (None, "") else "node"


def parse(text: str) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(DCGM version, [(test, gpu, status, message)]).

    Raises:
        ValueError: not dcgmi's JSON, or DCGM's runtime_error (the diagnostic did not run).
    """
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not any(k.startswith("DCGM") for k in doc):
        raise ValueError("dcgmi diag -j printed no DCGM diagnostic JSON")
    body = _body(doc)
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    version = str(doc.get("version") or meta.get("version") or body.get("version") or "?")
    if body.get("runtime_error"):
        raise ValueError(f"DCGM {version} could not run the diagnostic: "
                         f"{str(body['runtime_error']).strip()[:300]}")
    return version, _rows(body)


def judge(dcgm: Mapping[str, Any]) -> CheckResult:
    """Fail on every test DCGM failed; warn on its warnings; skip where DCGM is absent."""
    if not dcgm.get("tool"):
        return skipped(NAME, "DCGM is not installed (no dcgmi on PATH)", source=SOURCE)
    level = dcgm.get("level")
    if not level:
        return skipped(NAME, NOT_ASKED, source=SOURCE)
    expected = f"every test of level {level} Pass"
    if dcgm.get("unknown"):  # dcgmi hung (its process group killed) or crashed
        return unknown(NAME, f"could not be assessed: {dcgm['unknown']}", expected=expected,
                       source=SOURCE)
    try:
        version, rows = parse(str(dcgm.get("stdout") or ""))
    except ValueError as exc:
        detail = str(dcgm.get("stderr") or "").strip()[-300:]
        return failed(NAME, f"exit {dcgm.get('rc')}", expected, SOURCE,
                      f"{exc}; {detail or 'no error output'} (is nv-hostengine running?)")
    fails = [r for r in rows if r[2].lower() == "fail"]
    warns = [r for r in rows if r[2].lower() == "warn"]
    ran = sum(1 for r in rows if r[2].lower() in ("pass", "fail", "warn"))
    measured = f"{ran} result(s), {len(fails)} failed (DCGM {version}, level {level})"
    if fails:
        return failed(NAME, measured, expected, SOURCE,
                      "; ".join(f"{t} on {g}: {m or 'no message'}" for t, g, _s, m in fails))
    if not ran:
        return failed(NAME, measured, expected, SOURCE, "DCGM ran no test")
    if warns:
        return warned(NAME, measured, expected, SOURCE,
                      "; ".join(f"{t} on {g}: {m or 'no message'}" for t, g, _s, m in warns))
    return passed(NAME, measured, expected, SOURCE)


def judge_signal(read: SignalRead) -> Judged:
    """dcgm.diag from the reader's dcgmi run."""
    return Judged((judge(read.section("dcgm")),))
