"""JUnit XML: valid against Apache Ant's JUnit schema, one testcase per node and per check/pair."""

from __future__ import annotations

import importlib.resources
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nodetune.reports import junit
from tests.unit.reports_samples import HOSTILE, hostile_fleet, load

etree = pytest.importorskip("lxml.etree", reason="the dev extra installs lxml")


@pytest.fixture(scope="module")
def schema() -> object:
    """The Ant JUnit schema (windyroad's JUnit.xsd) as packaged by ub-test-reports (dev extra)."""
    xsd = importlib.resources.files("ub_test_reports") / "schemas" / "JUnit.xsd"
    return etree.XMLSchema(etree.parse(str(xsd)))


def _valid(schema: object, text: str) -> ET.Element:
    doc = etree.fromstring(text.encode())
    assert schema.validate(doc), schema.error_log  # type: ignore[attr-defined]
    return ET.fromstring(text)


def _total(root: ET.Element, attr: str) -> int:
    return sum(int(s.get(attr) or 0) for s in root.findall("testsuite"))


def _cases(root: ET.Element, suite: int) -> list[ET.Element]:
    return root.findall("testsuite")[suite].findall("testcase")


def test_fleet_validate_one_failing_node_testcase(schema: object) -> None:
    root = _valid(schema, junit.to_xml(load("validate-fleet"), hostname="ctl"))
    nodes = _cases(root, 0)
    assert [c.get("name") for c in nodes] == ["node-3", "node-1", "node-2", "node-4"]
    failing = [c for c in nodes if c.find("failure") is not None]
    assert len(failing) == 1 and failing[0].get("name") == "node-3"
    assert "below 0.05 GB/s" in (failing[0].find("failure").get("message") or "")  # type: ignore[union-attr]
    pairs = _cases(root, 1)
    assert len(pairs) == 4
    assert sum(c.find("failure") is not None for c in pairs) == 2
    assert _total(root, "failures") == 3 and _total(root, "tests") == 8


def test_two_node_pass(schema: object) -> None:
    root = _valid(schema, junit.to_xml(load("validate-pair")))
    assert _total(root, "failures") == 0 and _total(root, "errors") == 0
    assert [c.get("name") for c in _cases(root, 0)] == ["node-1", "node-2"]


def test_check_one_testcase_per_node_and_check(schema: object) -> None:
    root = _valid(schema, junit.to_xml(load("check")))
    assert len(_cases(root, 0)) == 3
    checks = _cases(root, 1)
    assert len(checks) == 12
    (bad,) = [c for c in checks if c.find("failure") is not None]
    assert (bad.get("classname"), bad.get("name")) == ("nodetune.check.node-2", "gpu.count")
    assert "missing from nvidia-smi" in (bad.find("failure").text or "")  # type: ignore[union-attr]
    out = root.findall("testsuite")[1].find("system-out").text or ""  # type: ignore[union-attr]
    assert "net.mtu: warn" in out and "ib.ports: skip" in out


def test_unreachable_is_an_error_and_an_early_error_still_reports(schema: object) -> None:
    doc = {"verb": "validate", "run_id": "r", "started": "2026-11-22T08:00:00+00:00",
           "exit_code": 3, "error": {"type": "SSHError", "host": "node-9",
                                     "message": "authentication failed\x1b[0m"}}
    root = _valid(schema, junit.to_xml(doc))
    (case,) = _cases(root, 0)
    assert case.find("error").get("type") == "unreachable"  # type: ignore[union-attr]
    doc = {"verb": "check", "exit_code": 2, "error": {"type": "InputError", "message": "bad"}}
    root = _valid(schema, junit.to_xml(doc))
    assert _total(root, "errors") == 1


def test_hostile_strings_stay_data(schema: object, tmp_path: Path) -> None:
    path = junit.write(tmp_path / "out" / "junit.xml", hostile_fleet())
    root = _valid(schema, path.read_text())
    assert _cases(root, 0)[0].get("name") == HOSTILE
    assert not list(path.parent.glob(".*tmp"))


def test_regression_is_a_failure_only_when_asked(schema: object) -> None:
    doc = load("validate-pair")
    doc["regressions"] = [{"node": "node-2", "message": "node-2: busbw 19% below the median"}]
    root = _valid(schema, junit.to_xml(doc))
    assert _total(root, "failures") == 0
    assert "19% below" in (root.findall("testsuite")[0].find("system-out").text or "")  # type: ignore[union-attr]
    doc["fail_on_regression"] = True
    root = _valid(schema, junit.to_xml(doc))
    (bad,) = [c for c in _cases(root, 0) if c.find("failure") is not None]
    assert bad.get("name") == "node-2"
    assert bad.find("failure").get("type") == "regression"  # type: ignore[union-attr]


def test_each_pair_case_names_its_transport_and_interface(schema: object) -> None:
    root = _valid(schema, junit.to_xml(load("validate-pair")))
    (case,) = _cases(root, 1)
    assert case.get("name") == "node-1 <-> node-2 round 1 over gloo/TCP eth1"
    fleet = load("validate-fleet")
    for p in fleet["pairs"]:
        p["path"] = "gloo/TCP eth0"
        p["warnings"] = ["the data path is the interface SSH uses on node-1 (eth0)"]
    root = _valid(schema, junit.to_xml(fleet))
    assert all(c.get("name", "").endswith(" over gloo/TCP eth0") for c in _cases(root, 1))
    out = root.findall("testsuite")[1].findtext("system-out") or ""
    assert "warning: the data path is the interface SSH uses on node-1 (eth0)" in out
