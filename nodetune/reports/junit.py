"""JUnit XML for CI: one testcase per node, and one per check (check) or pair (validate).

The output is valid against Apache Ant's JUnit schema (the strict one that
Jenkins' and GitLab's JUnit readers accept a superset of): ``testsuites`` of
``testsuite`` elements, each with ``properties``, ``testcase``\\ s,
``system-out`` and ``system-err``. That schema has no ``skipped`` element, so a
skipped check is a passing testcase whose skip is listed in the suite's
``system-out``. A bad node is a ``failure``; an unreachable, unresolved or not assessed
node an ``error`` (the test could not decide), both carrying the reason. A check that
could not be assessed (``unknown``) is an ``error`` too. Each failure and error ends
with the action to take (``action: reboot``, :mod:`nodetune.action`).
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune.files import write_atomic
from nodetune.reports import model

# XML 1.0 forbids most control characters even when escaped; NCCL logs and
# hostile inventory strings can carry them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(value: object) -> str:
    return _INVALID_XML.sub("?", str(value))


class _Suite:
    def __init__(self, name: str, package: str) -> None:
        self.name, self.package = name, package
        self.cases: list[ET.Element] = []
        self.failures = self.errors = 0
        self.out: list[str] = []

    def case(self, classname: str, name: str, *, failure: tuple[str, str] | None = None,
             error: tuple[str, str] | None = None, time: float = 0.0) -> None:
        el = ET.Element("testcase", {"name": _clean(name), "classname": _clean(classname),
                                     "time": f"{time:.3f}"})
        for tag, what in (("failure", failure), ("error", error)):
            if what is not None:
                kind, reason = what
                child = ET.SubElement(el, tag, {"type": _clean(kind),
                                                "message": _clean(reason)[:1000]})
                child.text = _clean(reason)
                if tag == "failure":
                    self.failures += 1
                else:
                    self.errors += 1
                break
        self.cases.append(el)

    def element(self, index: int, timestamp: str, hostname: str,
                properties: Mapping[str, str]) -> ET.Element:
        el = ET.Element("testsuite", {
            "name": _clean(self.name), "package": _clean(self.package), "id": str(index),
            "timestamp": timestamp, "hostname": _clean(hostname), "tests": str(len(self.cases)),
            "failures": str(self.failures), "errors": str(self.errors), "time": "0.000"})
        props = ET.SubElement(el, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", {"name": _clean(key), "value": _clean(value)})
        el.extend(self.cases)
        ET.SubElement(el, "system-out").text = _clean("\n".join(self.out))
        ET.SubElement(el, "system-err").text = ""
        return el


def _regressions(doc: Mapping[str, Any]) -> dict[str, str]:
    return {str(r.get("node")): str(r.get("message") or "")
            for r in doc.get("regressions") or [] if isinstance(r, Mapping)}


def _node_suite(doc: Mapping[str, Any], verb: str) -> _Suite:
    suite = _Suite(f"nodetune {verb}: nodes", f"nodetune.{verb}")
    slower = _regressions(doc)
    fail_slower = bool(doc.get("fail_on_regression"))
    for n in model.nodes_of(doc):
        reason = (n.reason or n.verdict) + (f" (action: {n.action})" if n.action not in
                                            ("", "none") else "")
        if n.name in slower and not fail_slower:
            suite.out.append(f"regression (warning): {slower[n.name]}")
        if n.name in slower and fail_slower and n.verdict == "good":
            suite.case(f"nodetune.{verb}.node", n.name, failure=("regression", slower[n.name]))
        elif n.verdict == "bad":
            suite.case(f"nodetune.{verb}.node", n.name, failure=("bad", reason))
        elif n.verdict in ("unreachable", "unresolved", "not_assessed"):
            suite.case(f"nodetune.{verb}.node", n.name, error=(n.verdict, reason))
        else:
            suite.case(f"nodetune.{verb}.node", n.name)
    return suite


def _pair_suite(doc: Mapping[str, Any]) -> _Suite:
    suite = _Suite("nodetune validate: pairs", "nodetune.validate")
    for p in model.pairs_of(doc):
        # The path is part of the name: a run over another interface is another test.
        name = (f"{p.name} round {p.round}"
                + (f" over {p.path}" if p.path else ""))
        big = p.largest
        if big is not None:
            suite.out.append(f"{name}: {p.verdict}, busbw {big.busbw:.2f} GB/s at "
                             f"{big.bytes} bytes")
        suite.out.extend(f"{name}: warning: {w}" for w in p.warnings)
        if p.verdict == "fail":
            suite.case("nodetune.validate.pair", name, failure=("fail", p.reason or "failed"))
        elif p.verdict in ("error", "timeout"):
            suite.case("nodetune.validate.pair", name, error=(p.verdict, p.reason or p.verdict))
        else:
            suite.case("nodetune.validate.pair", name)
    return suite


def _check_suite(doc: Mapping[str, Any], section: str = "checks") -> _Suite:
    if section == "rdma_bw":
        suite = _Suite("nodetune validate: rdma_bw", "nodetune.validate")
    else:
        suite = _Suite("nodetune check: checks", "nodetune.check")
    for c in model.checks_of(doc, section):
        detail = (f"{c.message} (measured {c.measured or '-'}, expected {c.expected or '-'}"
                  + (f"; source {c.source}" if c.source else "") + ")"
                  + (f" (action: {c.action})" if c.action not in ("", "none") else ""))
        classname = f"nodetune.{'validate' if section == 'rdma_bw' else 'check'}.{c.node}"
        if c.status == "fail":
            suite.case(classname, c.name, failure=("fail", detail))
        elif c.status == "unknown":
            suite.case(classname, c.name, error=("unknown", detail))
        else:
            if c.status in ("warn", "skip"):
                suite.out.append(f"{c.node} {c.name}: {c.status}: {detail}")
            suite.case(classname, c.name)
    return suite


def to_xml(doc: Mapping[str, Any], *, hostname: str | None = None) -> str:
    """The JUnit XML document for a ``check`` or ``validate`` run record."""
    verb = str(doc.get("verb") or "validate")
    suites = [_node_suite(doc, verb)]
    suites.append(_check_suite(doc) if verb == "check" else _pair_suite(doc))
    if verb != "check" and doc.get("rdma_bw"):
        suites.append(_check_suite(doc, "rdma_bw"))
    err = doc.get("error")
    if isinstance(err, Mapping) and not any(s.cases for s in suites):
        # The run ended before any node was judged: one errored testcase says why.
        suites[0].case(f"nodetune.{verb}.run", str(err.get("host") or "run"),
                       error=(str(err.get("type") or "error"), str(err.get("message") or "")))
    stamp = _timestamp(doc.get("started"))
    host = hostname or socket.gethostname() or "localhost"
    props = {"run_id": str(doc.get("run_id", "")), "exit_code": str(doc.get("exit_code", "")),
             "inventory": str(doc.get("inventory", "")),
             "nodetune_version": str(doc.get("nodetune_version", ""))}
    # Ant's schema allows no attributes on <testsuites>: the counts are per suite.
    root = ET.Element("testsuites")
    for i, s in enumerate(suites):
        root.append(s.element(i, stamp, host, props))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _timestamp(started: object) -> str:
    """The Ant schema's timestamp: ISO 8601 without a zone (UTC here)."""
    try:
        when = datetime.fromisoformat(str(started))
    except ValueError:
        when = datetime.now(UTC)
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write the JUnit XML for ``doc`` to ``path`` atomically (temp file in the same dir)."""
    write_atomic(path, to_xml(doc))
    return path
