"""Run records on disk: layout, schema, listing in order, and anything else in the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodetune import __version__
from nodetune.errors import InputError
from nodetune.records import SCHEMA_VERSION, list_runs, load_run, new_run


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
    (tmp_path / ".nodetune" / "runs" / "20000101T000000Z-apply").mkdir()
    runs = list_runs()
    # Oldest first: the record from the year 2000 precedes the one just written.
    assert [r["run_id"] for r in runs] == ["20000101T000000Z-apply", rec.id]
    assert runs[0]["error"] == "no report.json"
    assert load_run(rec.id[:10])["exit_code"] == 1
    with pytest.raises(InputError, match="no run"):
        load_run("1999")


def test_runs_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "elsewhere"))
    rec = new_run("validate")
    assert rec.path.parent == tmp_path / "elsewhere"


def test_oldest_first_whatever_the_creation_order(tmp_path: Path) -> None:
    base = tmp_path / ".nodetune" / "runs"
    for run_id in ("20260102T000000Z-facts", "20240101T000000Z-apply",
                   "20250101T000000Z-validate"):
        (base / run_id).mkdir(parents=True)
        (base / run_id / "report.json").write_text(json.dumps({"run_id": run_id}))
    assert [r["run_id"] for r in list_runs(root=tmp_path)] == [
        "20240101T000000Z-apply", "20250101T000000Z-validate", "20260102T000000Z-facts"]


def test_anything_in_the_runs_folder_is_listed_or_skipped(tmp_path: Path) -> None:
    base = tmp_path / ".nodetune" / "runs"
    good = new_run("apply", root=tmp_path)
    good.write({"exit_code": 0})
    (base / "a-stray-file").write_text("not a run")
    (base / "b-no-report").mkdir()
    (base / "c-garbage").mkdir()
    (base / "c-garbage" / "report.json").write_bytes(b"\xff{not json")
    (base / "d-list").mkdir()
    (base / "d-list" / "report.json").write_text("[1, 2]")
    (base / "e-null").mkdir()
    (base / "e-null" / "report.json").write_text("null")
    (base / "f-link").symlink_to(good.path)
    (base / "g-dangling").symlink_to(tmp_path / "nowhere")
    (base / "h-report-is-dir").mkdir()
    (base / "h-report-is-dir" / "report.json").mkdir()
    unreadable = base / "i-unreadable"
    unreadable.mkdir()
    (unreadable / "report.json").write_text("{}")
    unreadable.chmod(0)
    try:
        runs = {r["run_id"]: r for r in list_runs(root=tmp_path)}
    finally:
        unreadable.chmod(0o700)
    assert "a-stray-file" not in runs
    assert runs[good.id]["exit_code"] == 0
    assert runs["b-no-report"]["error"] == "no report.json"
    assert runs["c-garbage"]["error"] == "report.json is not valid JSON"
    assert runs["d-list"]["error"] == "report.json holds a JSON list, not a run record"
    assert runs["e-null"]["error"] == "report.json holds a JSON NoneType, not a run record"
    assert "symbolic link" in runs["f-link"]["error"]
    assert "symbolic link" in runs["g-dangling"]["error"]
    assert "unreadable" in runs["h-report-is-dir"]["error"]
    if os.geteuid() != 0:  # root reads a mode-0 directory anyway
        assert "unreadable" in runs["i-unreadable"]["error"]
    with pytest.raises(InputError, match="not valid JSON"):
        load_run("c-garbage", root=tmp_path)


def test_runs_folder_that_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "file"))
    (tmp_path / "file").write_text("x")
    assert list_runs() == []
    with pytest.raises(InputError, match="cannot create a run directory"):
        new_run("apply")
