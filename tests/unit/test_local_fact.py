"""The local_fact module (node_facts): install the fact script and gather it in one call.

The cases share ansible-playbook runs, in rounds: one local inventory host per case, each
with a facts directory of its own and its own module arguments; a case that runs the
module again (the same directory) does so in the next round. Check mode and diff are the
task's, per host (check_mode/diff keywords), as --check and --diff would set them for a
run of one.
"""

from __future__ import annotations

import getpass
import grp
import os
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import run_module

SCRIPT = '#!/bin/sh\necho \'{"gpus": 0, "where": "test"}\'\n'
NEW = SCRIPT.replace("test", "new")


def _round(tmp_path: Path, cases: dict[str, tuple[str, bool, bool]]) -> dict[str, Any]:
    """One ansible-playbook run of the module: a host per case, whose facts directory is
    tmp_path's parent's CASE/facts.d, with (content, check mode, diff); each case's own
    task result."""
    owner = {"owner": getpass.getuser(), "group": grp.getgrgid(os.getgid()).gr_name}
    return run_module(tmp_path, "local_fact", {
        case: ({"dir": str(tmp_path.parent / case / "facts.d"), "name": "t.fact",
                "content": content, "mode": "0755", **owner},
               {"check_mode": check, "diff": diff})
        for case, (content, check, diff) in cases.items()}, must_pass=True)


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's calls in three rounds (three ansible-playbook runs), and the drift
    case's file as the check-mode round left it.

    fresh: check mode and diff on a new node. install: installs, then check mode again.
    drift: installs; its file's mode is changed to 0700; check mode and diff with new
    content; then new content for real."""
    tmp = tmp_path_factory.mktemp("local_fact")
    first = _round(tmp / "round1", {"fresh": (SCRIPT, True, True),
                                    "install": (SCRIPT, False, False),
                                    "drift": (SCRIPT, False, False)})
    installed = tmp / "install" / "facts.d" / "t.fact"
    install = {"text": installed.read_text(), "mode": installed.stat().st_mode & 0o777}
    drifted = tmp / "drift" / "facts.d" / "t.fact"
    drifted.chmod(0o700)
    second = _round(tmp / "round2", {"install": (SCRIPT, True, False),
                                     "drift": (NEW, True, True)})
    checked = {"text": drifted.read_text(), "mode": drifted.stat().st_mode & 0o777}
    third = _round(tmp / "round3", {"drift": (NEW, False, False)})
    return {"tmp": tmp, "first": first, "second": second, "third": third,
            "install": install, "checked": checked}


def test_check_mode_on_a_fresh_node_predicts_writes_nothing_and_gives_the_facts(
        rounds: dict[str, Any]) -> None:
    """Later roles see in check mode the facts the script would give once installed."""
    res = rounds["first"]["fresh"]
    assert res["changed"]
    assert not (rounds["tmp"] / "fresh" / "facts.d").exists()
    assert [d["after"] for d in res["diff"]][1] == SCRIPT
    assert res["ansible_facts"]["ansible_local"] == {"t": {"gpus": 0, "where": "test"}}


def test_installs_gathers_and_then_changes_nothing(rounds: dict[str, Any]) -> None:
    first = rounds["first"]["install"]
    assert first["changed"] and rounds["install"]["text"] == SCRIPT
    assert oct(rounds["install"]["mode"]) == "0o755"
    assert first["ansible_facts"]["ansible_local"] == {"t": {"gpus": 0, "where": "test"}}
    again = rounds["second"]["install"]
    assert not again["changed"]
    assert again["ansible_facts"]["ansible_local"]["t"]["where"] == "test"


def test_content_and_mode_drift_are_shown_then_fixed(rounds: dict[str, Any]) -> None:
    fact = rounds["tmp"] / "drift" / "facts.d" / "t.fact"
    res = rounds["second"]["drift"]
    assert res["changed"] and oct(rounds["checked"]["mode"]) == "0o700"
    assert any(isinstance(d["before"], dict) and d["before"].get("mode") == "0700"
               for d in res["diff"])
    # Check mode gathers what the new content would give, the installed file unchanged.
    assert res["ansible_facts"]["ansible_local"]["t"]["where"] == "new"
    assert "test" in rounds["checked"]["text"]
    res = rounds["third"]["drift"]
    assert res["changed"] and oct(fact.stat().st_mode & 0o777) == "0o755"
    assert res["ansible_facts"]["ansible_local"]["t"]["where"] == "new"
