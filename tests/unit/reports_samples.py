"""Sample run records for the report tests: today's two-node validate, a fleet, a check."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
HOSTILE = '<script>alert("x")</script>&\'node"'


def load(name: str) -> dict[str, Any]:
    """A fresh copy of tests/fixtures/reports/NAME.json."""
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return copy.deepcopy(doc)


def hostile_fleet() -> dict[str, Any]:
    """The fleet record with node-3 renamed to markup and its reason full of quotes."""
    text = json.dumps(load("validate-fleet")).replace('"node-3"', json.dumps(HOSTILE))
    doc: dict[str, Any] = json.loads(text)
    doc["nodes"][HOSTILE]["reason"] += ' </td><img src=x onerror=alert(1)> "quoted"'
    return doc
