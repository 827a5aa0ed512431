"""Run records on disk and text tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodetune import __version__
from nodetune.errors import InputError
from nodetune.report import SCHEMA_VERSION, format_table, list_runs, load_run, new_run


def test_run_record_layout_and_schema(tmp_path: Path) -> None:
    rec = new_run("apply", root=tmp_path)
    assert rec.path.parent == tmp_path / ".nodetune" / "runs"
    assert rec.path.name.endswith("Z-apply")
    path = rec.write({"exit_code": 0, "hosts": []})
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["nodetune_version"] == __version__
    assert doc["verb"] == "apply"
    assert doc["run_id"] == rec.id


def test_two_runs_in_one_second_get_distinct_dirs(tmp_path: Path) -> None:
    a, b = new_run("facts", root=tmp_path), new_run("facts", root=tmp_path)
    assert a.path != b.path


def test_list_and_load_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rec = new_run("apply")
    rec.write({"inventory": "inventory/lab", "exit_code": 1})
    (tmp_path / ".nodetune" / "runs" / "broken-apply").mkdir()
    runs = list_runs()
    assert [r["run_id"] for r in runs] == ["broken-apply", rec.id] or \
        [r["run_id"] for r in runs] == [rec.id, "broken-apply"]
    assert any("error" in r for r in runs)
    assert load_run(rec.id[:10])["exit_code"] == 1
    with pytest.raises(InputError, match="no run"):
        load_run("1999")


def test_runs_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "elsewhere"))
    rec = new_run("validate")
    assert rec.path.parent == tmp_path / "elsewhere"


def test_format_table_aligns_numbers_right() -> None:
    text = format_table(["host", "ok", "note"], [["a", 1, None], ["bbbb", 10, "x"]])
    lines = text.splitlines()
    assert lines[0] == "host  ok  note"
    assert lines[2] == "a      1  -"
    assert lines[3] == "bbbb  10  x"


def test_format_table_formats_floats() -> None:
    assert "12.35" in format_table(["busbw"], [[12.345]])
