"""Prometheus textfile: parses with prometheus_client, conventions, atomic write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodetune.reports import prom
from tests.unit.reports_samples import HOSTILE, hostile_fleet, load

parser = pytest.importorskip("prometheus_client.parser", reason="the dev extra installs it")


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in parser.text_string_to_metric_families(text):
        assert fam.type == "gauge" and fam.documentation
        out[fam.name] = [(dict(s.labels), s.value) for s in fam.samples]
    return out


def test_fleet_validate_metrics() -> None:
    text = prom.to_text(load("validate-fleet"))
    fams = _families(text)
    busbw = fams["nodetune_validate_busbw_gbps"]
    assert len(busbw) == 4 * 4 * 2  # pairs x sizes x both sides
    one = {(lab["node"], lab["peer"], lab["bytes"]): v for lab, v in busbw}
    assert one[("node-3", "node-4", str(64 << 20))] == one[("node-4", "node-3", str(64 << 20))]
    healthy = {lab["node"]: v for lab, v in fams["nodetune_node_healthy"]}
    assert healthy == {"node-1": 1.0, "node-2": 1.0, "node-3": 0.0, "node-4": 1.0}
    ((labels, ts),) = fams["nodetune_last_run_timestamp_seconds"]
    assert labels == {"verb": "validate"} and ts == 1795338000.0
    assert "nodetune_check_status" not in fams
    for line in text.splitlines():  # HELP and TYPE precede every family
        assert line.startswith(("# HELP nodetune_", "# TYPE nodetune_", "nodetune_"))


def test_check_metrics() -> None:
    fams = _families(prom.to_text(load("check")))
    status = {(lab["node"], lab["check"]): v for lab, v in fams["nodetune_check_status"]}
    assert status[("node-2", "gpu.count")] == 2.0
    assert status[("node-3", "net.mtu")] == 1.0
    assert status[("node-1", "ib.ports")] == -1.0
    assert status[("node-1", "gpu.ecc")] == 0.0
    assert {lab["verb"] for lab, _ in fams["nodetune_node_healthy"]} == {"check"}


def test_label_values_are_escaped() -> None:
    doc = load("check")
    doc["nodes"] = {'a"b\\c\nd': {"verdict": "good"}}
    text = prom.to_text(doc)
    assert 'node="a\\"b\\\\c\\nd"' in text
    assert {lab["node"] for lab, _ in _families(text)["nodetune_node_healthy"]} == {
        'a"b\\c\nd'}
    fams = _families(prom.to_text(hostile_fleet()))
    assert HOSTILE in {lab["node"] for lab, _ in fams["nodetune_node_healthy"]}


def test_written_atomically_with_a_temp_name_the_collector_ignores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "nodetune.prom"
    target.write_text("old\n")
    seen: list[str] = []
    real_rename = os.rename

    def spy(src: str, dst: str) -> None:  # prometheus_client's write_to_textfile renames
        seen.append(os.path.basename(src))
        assert Path(dst).read_text() == "old\n"  # the reader still sees the old file
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    prom.write(target, load("check"))
    # node_exporter's textfile collector reads *.prom only: the temp file is skipped.
    assert seen and seen[0].startswith("nodetune.prom.") and not seen[0].endswith(".prom")
    assert os.path.dirname(str(target)) == str(tmp_path)
    assert list(tmp_path.iterdir()) == [target]
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    _families(target.read_text())
