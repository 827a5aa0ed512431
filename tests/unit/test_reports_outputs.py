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
    paths = outputs.write_outputs(load("check"), junit_path=tmp_path / "j.xml",
                                  prom_path=tmp_path / "n.prom")
    assert [p.name for p in paths] == ["j.xml", "n.prom"]
    assert "<testsuites>" in paths[0].read_text()
    assert "nodetune_check_status" in paths[1].read_text()
