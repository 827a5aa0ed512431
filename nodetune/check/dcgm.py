"""``dcgm.diag``: NVIDIA DCGM's diagnostic (``dcgmi diag -r LEVEL -j``) where DCGM is
installed; every failed test named with DCGM's own message.

Levels (NVIDIA DCGM User Guide, "Run Levels", read 2026-11): 1 quick (deployment and
software checks, seconds), 2 medium (adds short PCIe/memory tests, about 2 minutes),
3 long (about 30 minutes), 4 extended (about 1 to 2 hours). ``check`` runs level 1
unless ``--dcgm-level`` asks for more.

JSON: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"results": [{"gpu_ids"|"entity_id", "status", "warnings": [{"warning", "error_id"}],
"info"}]}]}]}, "version"}`` (DCGM 3.x); DCGM 4 names the top key "DCGM Diagnostic"
and may add ``test_summary``. Both are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, failed, passed, skipped, warned

NAME = "dcgm.diag"
SOURCE = "NVIDIA DCGM dcgmi diag (DCGM User Guide, 2026-11)"
LEVELS = (1, 2, 3, 4)


def _results(doc: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(category, test, result) for every result of every test."""
    body = next((v for k, v in doc.items() if k.startswith("DCGM") and isinstance(v, dict)),
                {})
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for cat in body.get("test_categories") or []:
        for test in (cat or {}).get("tests") or []:
            for res in (test or {}).get("results") or []:
                if isinstance(res, dict):
                    out.append((str(cat.get("category", "")), str(test.get("name", "?")), res))
    return out


def _words(res: Mapping[str, Any]) -> str:
    warnings = res.get("warnings") or []
    text = [str(w.get("warning", "")) if isinstance(w, dict) else str(w) for w in warnings]
    text = [t.strip() for t in text if t and t.strip()]
    if not text and res.get("info"):
        info = res["info"]
        text = [str(i) for i in info] if isinstance(info, list) else [str(info)]
    return " / ".join(text)[:400] or "no message"


def _gpu(res: Mapping[str, Any]) -> str:
    ids = res.get("gpu_ids", res.get("entity_id"))
    return f"GPU {ids}" if ids not in (None, "") else "node"


def parse(text: str) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(DCGM version, [(test, gpu, status, message)]).

    Raises:
        ValueError: not dcgmi's JSON.
    """
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not any(k.startswith("DCGM") for k in doc):
        raise ValueError("dcgmi diag -j printed no DCGM diagnostic JSON")
    rows = [(test, _gpu(res), str(res.get("status", "")), _words(res))
            for _cat, test, res in _results(doc)]
    return str(doc.get("version", "?")), rows


def judge(dcgm: Mapping[str, Any]) -> CheckResult:
    """Fail on every test DCGM failed; warn on its warnings; skip where DCGM is absent."""
    if not dcgm.get("tool"):
        return skipped(NAME, "DCGM is not installed (no dcgmi on PATH)", source=SOURCE)
    level = dcgm.get("level")
    if not level:
        return skipped(NAME, "not asked for (--dcgm-level 0)", source=SOURCE)
    expected = f"every test of level {level} Pass"
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
                      "; ".join(f"{t} on {g}: {m}" for t, g, _s, m in fails))
    if not ran:
        return failed(NAME, measured, expected, SOURCE, "DCGM ran no test")
    if warns:
        return warned(NAME, measured, expected, SOURCE,
                      "; ".join(f"{t} on {g}: {m}" for t, g, _s, m in warns))
    return passed(NAME, measured, expected, SOURCE)
