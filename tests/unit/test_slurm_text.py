"""Slurm read from sinfo/squeue text where `--json` is missing, and the switch to it.

The fixtures are the lab's real Slurm (Debian's slurm-wlm 22.05.8, `nodetune lab up
--with-slurm`, 2026-11-26): nt-ux-2 drained with a reason holding `|`, a job on nt-ux-[1,3],
and (the -forged files) nt-ux-4 drained with a reason whose second line reads like nt-ux-1's
row. The "unrecognized option" text is what that sinfo prints for an option it lacks
(`sinfo --jsonx`), as a Slurm before 21.08 does for --json.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodetune.remote.ssh import CommandResult
from nodetune.slurm import text
from nodetune.slurm.scontrol import Scontrol
from nodetune.slurm.state import SlurmNode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NO_JSON = "sinfo: unrecognized option '--json'\nTry \"sinfo --help\" for more information\n"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_nodes_from_text_match_what_json_says() -> None:
    nodes = text.parse_nodes(_read("sinfo-names.txt"), _read("sinfo-rows.txt"))
    assert nodes["nt-ux-2"] == SlurmNode("nt-ux-2", "idle+drain",
                                         "nodetune check: gpu.count 7|8 [run x]")
    assert nodes["nt-ux-2"].out_of_service and not nodes["nt-ux-2"].busy
    assert nodes["nt-ux-1"].busy and nodes["nt-ux-1"].reason == ""
    assert nodes["nt-ux-4"] == SlurmNode("nt-ux-4", "idle", "")


def test_a_reason_with_a_line_break_is_refused_not_read_as_another_node() -> None:
    with pytest.raises(ValueError, match="5 node rows with reasons but 4 without"):
        text.parse_nodes(_read("sinfo-forged-names.txt"), _read("sinfo-forged-rows.txt"))
    with pytest.raises(ValueError, match="is not node 'nt-ux-2'"):
        text.parse_nodes("nt-ux-1 idle\nnt-ux-2 idle\n", "nt-ux-1|idle|none\nnt-ux-9|idle|x\n")


def test_jobs_from_text_expand_host_lists() -> None:
    assert text.parse_jobs(_read("squeue-busy.txt")) == {"nt-ux-1": ("1",), "nt-ux-3": ("1",)}
    assert text.parse_jobs("7 PENDING (null)\n8 COMPLETED n1\n") == {}
    assert text.expand("gpu-[08-10],n[1,3]x[1-2],login") == [
        "gpu-08", "gpu-09", "gpu-10", "n1x1", "n1x2", "n3x1", "n3x2", "login"]


@pytest.mark.parametrize("word, state", [("drained", "idle+drain"), ("draining", "mixed+drain"),
                                         ("down*", "down"), ("idle~", "idle"),
                                         ("mixed", "mixed")])
def test_state_words(word: str, state: str) -> None:
    assert text.state_of(word) == state


class _OldSlurm:
    """Stands in for the SSH session to a controller whose Slurm has no --json; the text
    columns answer from the lab's captured output."""

    def __init__(self, json_error: str = NO_JSON) -> None:
        self.asked: list[list[str]] = []
        self.json_error = json_error

    def run(self, argv: Sequence[str], *, timeout: float, **_kw: Any) -> CommandResult:
        self.asked.append(list(argv))
        if "--json" in argv:
            return CommandResult(1, "", self.json_error)
        answer = {text.SINFO_NAMES: "sinfo-names.txt", text.SINFO_ROWS: "sinfo-rows.txt",
                  text.SQUEUE_ROWS: "squeue-busy.txt"}[tuple(argv)]
        return CommandResult(0, _read(answer), "")

    def close(self) -> None:
        pass


def test_scontrol_falls_back_to_text_once_and_remembers() -> None:
    session = _OldSlurm()
    scontrol = Scontrol(session, "nt-ux-1")  # type: ignore[arg-type]
    assert scontrol.nodes(["nt-ux-2"]) == {
        "nt-ux-2": SlurmNode("nt-ux-2", "idle+drain", "nodetune check: gpu.count 7|8 [run x]")}
    assert scontrol.jobs() == {"nt-ux-1": ("1",), "nt-ux-3": ("1",)}
    assert session.asked == [["sinfo", "--json"], list(text.SINFO_NAMES),
                             list(text.SINFO_ROWS), list(text.SQUEUE_ROWS)]


def test_any_other_sinfo_failure_is_still_an_error() -> None:
    from nodetune.errors import SlurmError

    session = _OldSlurm("slurm_load_node error: Unable to contact slurm controller")
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        Scontrol(session, "nt-ux-1").nodes([])  # type: ignore[arg-type]
    assert session.asked == [["sinfo", "--json"]]
