"""--junit / --prom-textfile paths: refused up front when unwritable, written when asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetune.errors import InputError
from nodetune.reports import outputs
from tests.unit.reports_samples import load


def test_unwritable_paths_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--junit .*does not exist"):
        outputs.check_writable(tmp_path / "missing" / "j.xml", "--junit")
    with pytest.raises(InputError, match="is a directory"):
        outputs.check_writable(tmp_path, "--prom-textfile")
    outputs.check_writable(tmp_path / "ok.prom", "--prom-textfile")
    outputs.check_writable(None, "--junit")


def test_writes_both_files(tmp_path: Path) -> None:
    written = outputs.finish(tmp_path, load("check"), outputs.Requested(
        junit=tmp_path / "j.xml", prom_textfile=tmp_path / "n.prom"))
    assert written.problems == ()
    paths = written.paths
    assert [p.name for p in paths] == ["report.html", "j.xml", "n.prom"]
    assert "<testsuites>" in paths[1].read_text()
    assert "nodetune_check_status" in paths[2].read_text()
