"""Repeat offenders: a node nodetune drained again and again is serviced, not resumed
(nodetune/slurm/offenders.py), counted from the run records as `runs --node` shows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodetune.errors import InputError
from nodetune.slurm import offenders
from nodetune.slurm.act import decide
from nodetune.slurm.model import SlurmOptions
from nodetune.slurm.reasons import Owner
from nodetune.verdicts import NodeState, NodeVerdict
from tests.conftest import run_nodetune
from tests.unit.test_slurm import DRAINED_BY_VALIDATE, VALIDATE_RUN, drained, run_of

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def record(run_id: str, node: str, days_ago: float, **extra: Any) -> dict[str, Any]:
    """A validate run's report.json as apply_verdicts writes its Slurm section."""
    return {"run_id": run_id, "verb": "validate",
            "started": (NOW - timedelta(days=days_ago)).isoformat(),
            "slurm": {"controller": "ctl", "actions": [
                {"node": node, "slurm_node": node, "action": "drain",
                 "reason": f"nodetune validate {run_id}: busbw 0.02 < 0.05", "command": [],
                 "dry_run": False, "state_after": "IDLE+DRAIN", **extra}]}}


def test_drains_count_what_was_carried_out_within_the_window() -> None:
    docs = [record("r1", "n1", 9), record("r2", "n1", 5), record("r3", "n1", 3),
            record("r4", "n1", 2, dry_run=True), record("r5", "n1", 1, error="scontrol: x"),
            record("r6", "n2", 1), record("r7", "n1", 0.5)]
    found = offenders.drains("n1", docs, now=NOW)
    assert [d.run_id for d in found] == ["r2", "r3", "r7"]  # r1 too old, r4-r6 not n1's drains
    assert offenders.drains("n1", docs, now=NOW, window_days=4) == found[1:]
    assert offenders.service_reason(found, after=3, window_days=7) == (
        "drained by nodetune 3 times in the last 7 days (runs r2, r3, r7): a repeat "
        "offender, not resumed [action: service]")
    assert offenders.service_reason(found[1:], after=3, window_days=7) is None
    assert offenders.service_reason(found, after=0, window_days=7) is None  # rule off


def test_a_repeat_offender_is_serviced_instead_of_resumed() -> None:
    owner = Owner("validate", VALIDATE_RUN, mark=None, mark_recorded=True)
    node = drained(DRAINED_BY_VALIDATE, when=1.0)
    good = NodeVerdict("n1", NodeState.GOOD, "pair passed")
    three = offenders.drains("n1", [record(f"r{i}", "n1", i) for i in (1, 2, 3)], now=NOW)
    action = decide(good, node, SlurmOptions(resume=True), run_of("validate"), owner,
                    drained=three)
    assert action is not None and action.action == "skip" and not action.command
    assert "a repeat offender, not resumed [action: service]" in action.reason
    # two drains, or the rule turned off: resumed as before
    for drains, options in ((three[1:], SlurmOptions(resume=True)),
                            (three, SlurmOptions(resume=True, service_after=0))):
        action = decide(good, node, options, run_of("validate"), owner, drained=drains)
        assert action is not None and action.action == "resume", action


def test_the_window_and_count_are_checked_before_anything_runs() -> None:
    with pytest.raises(InputError, match="--service-after -1"):
        SlurmOptions(resume=True, service_after=-1).check()
    with pytest.raises(InputError, match="window of more than 0 days"):
        SlurmOptions(resume=True, service_window_days=0).check()


def test_runs_node_counts_the_drains(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    now = datetime.now(UTC)
    for i in range(3):
        run_id = f"2026112{i}T000000Z-validate"
        doc = record(run_id, "gpu-7", 0)
        doc["started"] = (now - timedelta(days=i + 1)).isoformat()
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "report.json").write_text(json.dumps(doc))
    res = run_nodetune("runs", "--node", "gpu-7", runs_dir=runs)
    assert res.code == 0, res.stdout + res.stderr
    assert ("drained by nodetune 3 time(s) in the last 7 days: 20261122T000000Z-validate, "
            "20261121T000000Z-validate, 20261120T000000Z-validate (a repeat offender: "
            "--resume services it, from 3)") in " ".join(res.stdout.split())
