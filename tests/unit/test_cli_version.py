"""`nodetune --version` names the roles' collection; `nodetune completion` prints click's scripts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodetune import __version__
from nodetune.ansible.collection import read_collection
from nodetune.cli import main
from nodetune.errors import PlaybookError

REPO = Path(__file__).resolve().parents[2]


def test_version_names_package_and_collection() -> None:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0
    assert f"nodetune {__version__}" in res.output
    assert f"roles: nodetune.cluster {galaxy['version']}" in res.output
    assert "ansible-core 2." in res.output


def test_collection_version_follows_the_package() -> None:
    assert read_collection(REPO).version == __version__


def test_read_collection_rejects_incomplete_metadata(tmp_path: Path) -> None:
    (tmp_path / "galaxy.yml").write_text("namespace: nodetune\nname: cluster\n")
    with pytest.raises(PlaybookError, match="version"):
        read_collection(tmp_path)
    with pytest.raises(PlaybookError, match="cannot read"):
        read_collection(tmp_path / "absent")


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o nosort -F"),
                                               ("zsh", "compdef"), ("fish", "complete --no-files --command nodetune")])
def test_completion_prints_the_shell_script(shell: str, marker: str) -> None:
    res = CliRunner().invoke(main, ["completion", shell])
    assert res.exit_code == 0
    assert marker in res.output and "_NODETUNE_COMPLETE" in res.output


def test_completion_completes_verbs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_NODETUNE_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "nodetune ap")
    monkeypatch.setenv("COMP_CWORD", "1")
    res = CliRunner().invoke(main, [], prog_name="nodetune", complete_var="_NODETUNE_COMPLETE")
    assert res.output.split() == ["plain,apply"]


def test_completion_rejects_unknown_shell() -> None:
    res = CliRunner().invoke(main, ["completion", "tcsh"])
    assert res.exit_code == 2
