"""One drain policy for both nodetune writers (the controller's --drain/--resume and the
node-local health check), each writer's own reason form, the guard every resume keeps,
and the pass mark a resume must match.

Both sides' real decide() functions are run on the same node states; Slurm itself is
proven in tests/integration/test_slurm.py and test_slurm_healthcheck.py.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodetune.check import slurm_decide
from nodetune.check.model import CheckResult, NodeChecks, failed, passed, skipped, warned
from nodetune.check.run import CheckOptions, node_verdicts
from nodetune.check.verb import check_mark
from nodetune.records import RunRecord
from nodetune.slurm.act import decide
from nodetune.slurm.model import Action, SlurmOptions
from nodetune.slurm.policy import PassMark, strictest, weakest, writer_of
from nodetune.slurm.reasons import Owner, drain_reason, proven_owner
from nodetune.slurm.state import SlurmNode
from nodetune.verdicts import NodeState, NodeVerdict
from tests.conftest import run_nodetune
from tests.unit.test_slurm_busy import LOCAL, FakeSlurm, sinfo_doc
from tests.unit.test_slurm_busy import inventory as busy_inventory

README = Path(__file__).resolve().parents[2] / "README.md"
MiB = 1 << 20

DRAIN_RUN = "20261122T081500Z-validate"


def run_of(verb: str, stamp: str = "20261122T090000Z") -> RunRecord:
    return RunRecord(path=Path("runs") / f"{stamp}-{verb}", verb=verb,
                     started=datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))


VALIDATE = run_of("validate")
BEFORE = VALIDATE.started.timestamp() - 600   # drained ten minutes before the run started
AFTER = VALIDATE.started.timestamp() + 5      # drained while it ran

# --- one policy: node states x owners, for each side ------------------------------------

BAD_CHECKS = NodeChecks("n1", (failed("gpu.xid", "79", "none", "catalogue", "x"),))
GOOD_CHECKS = NodeChecks("n1", (passed("gpu.xid", "none", "none", "catalogue"),))
# Each side's view of a drain: its own, the other nodetune writer's, a person's.
CONTROLLER_OWN = drain_reason("busbw 0.02 GB/s below 0.05", kind="validate", run_id=DRAIN_RUN)
HEALTHCHECK_OWN = "nodetune healthcheck: gpu.xid 48, expected none"   # an older failure
PERSON = "hardware ticket 123"
SIDES: dict[str, dict[str, str]] = {
    "controller": {"self": CONTROLLER_OWN, "other": HEALTHCHECK_OWN, "person": PERSON},
    "healthcheck": {"self": HEALTHCHECK_OWN, "other": CONTROLLER_OWN, "person": PERSON},
}

IN_SERVICE = ("idle", "mixed", "allocated", "mixed+completing", "idle+reserved")
OUT_OF_SERVICE = ("idle+drain", "mixed+drain", "allocated+drain", "down+drain")
# Slurm holds these for now (a reboot, power saving, maintenance, a future node): as
# sinfo --json writes the flags (MAINTENANCE) and as its text does (maint).
HELD_IN_SERVICE = ("idle+maintenance", "idle+maint", "mixed+reboot_requested",
                   "idle+powering_down", "idle+power_down", "idle+powered_down", "future",
                   "idle+powering_up")
HELD_OUT = ("idle+drain+reboot_requested", "down+drain+reboot_issued",
            "idle+drain+powered_down", "mixed+drain+maintenance", "idle+drain+powering_down")

TABLE: list[tuple[str, str, str, str]] = [
    *[(s, "none", "drain", "nothing") for s in IN_SERVICE],
    *[(s, "self", "drain", "resume") for s in OUT_OF_SERVICE],
    *[(s, o, "leave", "leave") for s in OUT_OF_SERVICE for o in ("other", "person")],
    *[(s, "none", "leave", "nothing") for s in HELD_IN_SERVICE],
    *[(s, o, "leave", "leave") for s in HELD_OUT for o in ("self", "other", "person")],
    # Slurm's own DOWN (no drain over it), whoever's reason it shows.
    *[("down", o, "leave", "leave") for o in ("self", "other", "person")],
]


def controller_side(state: str, owner: str, *, bad: bool) -> str:
    reason = SIDES["controller"].get(owner, "")
    node = SlurmNode("n1", state, reason, reason_time=BEFORE)
    proven = Owner("validate", DRAIN_RUN, mark=None, mark_recorded=True) \
        if owner == "self" else None
    verdict = NodeVerdict("n1", NodeState.BAD if bad else NodeState.GOOD, "why")
    options = SlurmOptions(drain=True) if bad else SlurmOptions(resume=True)
    action = decide(verdict, node, options, VALIDATE, proven)
    if action is None:
        return "leave" if bad else "nothing"
    return {"skip": "leave"}.get(action.action, action.action)


def healthcheck_side(state: str, owner: str, *, bad: bool) -> str:
    reason = SIDES["healthcheck"].get(owner, "")
    node = SlurmNode("n1", state, reason, reason_time=BEFORE)
    owned = HEALTHCHECK_OWN if owner == "self" else None
    decision = slurm_decide.decide(BAD_CHECKS if bad else GOOD_CHECKS, node, owned)
    if decision.action == "none":
        return "leave" if bad or node.out_of_service else "nothing"
    return decision.action


@pytest.mark.parametrize(("state", "owner", "bad", "good"), TABLE)
def test_one_policy_for_both_writers(state: str, owner: str, bad: str, good: str) -> None:
    """Per node state and whose its drain is: what a bad and a good verdict do, the same
    on the controller (validate) and on the node (the health check)."""
    got = {side: (fn(state, owner, bad=True), fn(state, owner, bad=False))
           for side, fn in (("controller", controller_side), ("healthcheck", healthcheck_side))}
    assert got == {"controller": (bad, good), "healthcheck": (bad, good)}


# --- each writer its own reason form ---------------------------------------------------


def test_each_writer_has_its_own_reason_form() -> None:
    mine = slurm_decide.drain_reason(BAD_CHECKS)
    assert mine == "nodetune healthcheck: gpu.xid 79, expected none [action: re-run]"
    assert writer_of(mine) == "healthcheck"
    assert writer_of(CONTROLLER_OWN) == "controller"
    assert writer_of("nodetune reboot: driver 550.127.08 installed") == "reboot"
    assert writer_of("nodetune: gpu.xid 79, expected none") == "nodetune"  # the old form
    assert writer_of(PERSON) is None


def test_the_docs_resume_reason_examples_never_name_a_health_check_drain() -> None:
    """A validate pass says nothing of an Xid: the --resume-reason examples of the README
    and docs/ must not lift the health check's drains."""
    text = "".join(p.read_text() for p in (README, *sorted(README.parent.glob("docs/*.md"))))
    examples = re.findall(r"--resume-reason\s+'([^']+)'", text)
    assert examples
    for pattern in examples:
        assert not re.search(pattern, slurm_decide.drain_reason(BAD_CHECKS)), pattern


def test_a_controller_pass_lifts_a_health_check_drain_only_when_named_and_older() -> None:
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    node = SlurmNode("n1", "idle+drain", slurm_decide.drain_reason(BAD_CHECKS), reason_time=BEFORE)
    action = decide(good, node, SlurmOptions(resume=True), VALIDATE)
    assert action is not None and action.action == "skip" and not action.command
    assert "nodetune's healthcheck writer" in action.reason
    named = SlurmOptions(resume=True, resume_reason="^nodetune healthcheck: gpu.xid")
    action = decide(good, node, named, VALIDATE)
    assert action is not None and action.action == "resume"
    later = SlurmNode("n1", "idle+drain", node.reason, reason_time=AFTER)
    action = decide(good, later, named, VALIDATE)
    assert action is not None and action.action == "skip"
    assert "drained after this run started" in action.reason


def test_a_named_resume_keeps_the_drained_after_start_guard() -> None:
    """A person's drain made while the run measured is not lifted by that measurement."""
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    named = SlurmOptions(resume=True, resume_reason="^maintenance: ")
    during = SlurmNode("n1", "idle+drain", "maintenance: PSU swap", reason_time=AFTER)
    action = decide(good, during, named, VALIDATE)
    assert action is not None and action.action == "skip" and not action.command
    assert "drained after this run started" in action.reason
    before = SlurmNode("n1", "idle+drain", "maintenance: PSU swap", reason_time=BEFORE)
    action = decide(good, before, named, VALIDATE)
    assert action is not None and action.action == "resume"
    # Slurm that cannot say when (sinfo's text, no --json): not shown older, not resumed.
    unknown = SlurmNode("n1", "idle+drain", "maintenance: PSU swap")
    action = decide(good, unknown, named, VALIDATE)
    assert action is not None and action.action == "skip" and "did not say when" in action.reason


# --- the pass mark a resume must match -------------------------------------------------


def mark(gbps: float | None, at: int = 4 * MiB, **kw: Any) -> PassMark:
    return PassMark(busbw_gbps=gbps, at_bytes=at, collective="all_reduce", backend="gloo", **kw)


def drained_by(m: PassMark | None) -> tuple[SlurmNode, Owner]:
    """A validate run drains n1 judged by ``m``: its run record (the drain action as
    report.json holds it) is what the later resume reads back."""
    drainer = run_of("validate", "20261122T081500Z")
    bad = NodeVerdict("n1", NodeState.BAD, "busbw 0.03 GB/s at 4 MiB is below 0.05 GB/s")
    action = decide(bad, SlurmNode("n1", "idle"), SlurmOptions(drain=True), drainer, None, m)
    assert isinstance(action, Action) and action.action == "drain"
    record = {"run_id": drainer.id, "verb": "validate", "started": drainer.started.isoformat(),
              "duration_s": 30.0, "slurm": {"controller": "ctl", "actions": [action.to_dict()]}}
    assert record["slurm"]["actions"][0]["pass_mark"] == (m.to_dict() if m else None)
    node = SlurmNode("n1", "idle+drain", action.reason,
                     reason_time=drainer.started.timestamp() + 20)
    owner = proven_owner(node, {drainer.id: record}.get)
    assert owner is not None and owner.mark == m and owner.mark_recorded
    return node, owner


@pytest.mark.parametrize(("now", "resumed", "why"), [
    (mark(None), False, "judged no bandwidth"),           # correct sums alone
    (mark(0.02), False, "below the drain's 0.05"),        # a lower mark
    (mark(0.05, at=16 * MiB), False, "a larger size than the drain's 4 MiB"),
    (PassMark(0.05, 4 * MiB, backend="nccl"), False, "measured all_reduce over nccl"),
    (mark(0.05, expect_transport="any", rdma_bw=True), True, ""),
    (mark(0.05), True, ""),                                # the same mark
    (mark(0.1, at=MiB), True, ""),                         # a stricter one
    (None, False, "measured no pair bandwidth"),           # not a validate measurement
])
def test_a_bandwidth_drain_is_lifted_only_by_a_pass_as_strict(
        now: PassMark | None, resumed: bool, why: str) -> None:
    node, owner = drained_by(mark(0.05))
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    action = decide(good, node, SlurmOptions(resume=True), VALIDATE, owner, now)
    assert action is not None
    assert action.action == ("resume" if resumed else "skip"), action.reason
    assert why in action.reason
    # Naming the reason does not make a weaker pass any stronger.
    named = decide(good, node, SlurmOptions(resume=True, resume_reason="^nodetune "),
                   VALIDATE, owner, now)
    assert named is not None and named.action == action.action


def test_a_drain_that_judged_no_bandwidth_is_lifted_by_any_validate_pass() -> None:
    node, owner = drained_by(mark(None))
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    action = decide(good, node, SlurmOptions(resume=True), VALIDATE, owner, mark(None))
    assert action is not None and action.action == "resume"


def test_a_drain_recorded_before_pass_marks_needs_a_pass_that_judged_bandwidth() -> None:
    node = SlurmNode("n1", "idle+drain", CONTROLLER_OWN, reason_time=BEFORE)
    old = Owner("validate", DRAIN_RUN)  # its record has no pass_mark
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    skip = decide(good, node, SlurmOptions(resume=True), VALIDATE, old, mark(None))
    assert skip is not None and skip.action == "skip"
    assert "does not say its pass mark" in skip.reason
    action = decide(good, node, SlurmOptions(resume=True), VALIDATE, old, mark(0.01))
    assert action is not None and action.action == "resume"


def test_a_nodes_mark_over_several_tests() -> None:
    """A good node proved the least of its passes; a drained one was asked the most."""
    low, high = mark(0.05, at=16 * MiB), mark(0.2, at=4 * MiB, expect_transport="ib")
    assert weakest([low, high]) == mark(0.05, at=16 * MiB)
    assert strictest([low, high]) == mark(0.2, at=4 * MiB, expect_transport="ib")
    assert weakest([mark(None), high]) == mark(None, at=4 * MiB)
    assert weakest([]) is None and strictest([]) is None


# --- what a check resume must have passed ----------------------------------------------

CHECK_DRAIN_RUN = run_of("check", "20261122T081500Z")
CHECK = run_of("check")
DIAG_FAIL = failed("dcgm.diag", "Fail: Memory", "every test of level 3 Pass", "dcgmi diag -r 3",
                   "GPU 2 failed the memory test")
STATE_ONLY = CheckOptions(allreduce=False, dcgm_level=0)  # --skip-allreduce --dcgm-level 0


def checks_of(*results: CheckResult) -> NodeChecks:
    return NodeChecks("n1", (passed("gpu.count", "8", "8", "nvidia-smi"), *results))


def check_drained(legacy: bool = False) -> tuple[SlurmNode, Owner]:
    """`check --drain --dcgm-level 3` drains n1 for dcgm.diag: its run record (the drain
    action as report.json holds it) is what the later resume reads back."""
    bad_checks = checks_of(DIAG_FAIL)
    bad = node_verdicts({"n1": bad_checks})["n1"]
    action = decide(bad, SlurmNode("n1", "idle"), SlurmOptions(drain=True), CHECK_DRAIN_RUN,
                    None, check_mark(bad_checks, CheckOptions(dcgm_level=3)))
    assert isinstance(action, Action) and action.action == "drain"
    doc = action.to_dict()
    assert doc["failed_checks"] == ["dcgm.diag"] and doc["dcgm_level"] == 3
    if legacy:  # a record from before the failed checks (and the level) were recorded
        del doc["failed_checks"], doc["dcgm_level"]
    record = {"run_id": CHECK_DRAIN_RUN.id, "verb": "check", "slurm": {
        "controller": "ctl", "actions": [doc]}}
    node = SlurmNode("n1", "idle+drain", action.reason, reason_time=BEFORE)
    owner = proven_owner(node, {CHECK_DRAIN_RUN.id: record}.get)
    assert owner is not None and owner.checks == (None if legacy else ("dcgm.diag",))
    assert owner.dcgm_level == (None if legacy else 3)
    return node, owner


SKIPPED_DIAG = skipped("dcgm.diag", "--dcgm-level 0")
SKIPPED_SWEEP = skipped("gpu.allreduce", "--skip-allreduce")


@pytest.mark.parametrize(("checks", "options", "resumed", "why"), [
    # `check --resume --dcgm-level 0 --skip-allreduce` reads state only: the drain stays.
    (checks_of(SKIPPED_DIAG, SKIPPED_SWEEP), STATE_ONLY, False,
     "drained for dcgm.diag, which this run did not pass"),
    # --dcgm-level 3 again, with dcgmi gone from the node: it ran the check and found no
    # DCGM to run (a skip, no failure): tested.
    (checks_of(skipped("dcgm.diag", "no dcgmi"), passed("gpu.allreduce", "330", "300", "s")),
     CheckOptions(dcgm_level=3), True, ""),
    # The check failed again elsewhere (another item of it): not lifted.
    (checks_of(SKIPPED_DIAG), CheckOptions(allreduce=False, dcgm_level=0), False,
     "drained for dcgm.diag"),
    (checks_of(passed("dcgm.diag", "Pass", "Pass", "dcgmi diag -r 3"), SKIPPED_SWEEP),
     CheckOptions(allreduce=False, dcgm_level=3), True, ""),
    (checks_of(warned("dcgm.diag", "Warn", "Pass", "dcgmi diag -r 3", "a warning")),
     CheckOptions(dcgm_level=3), True, ""),
    # Deeper than the drain's level 3 also tests what failed.
    (checks_of(passed("dcgm.diag", "Pass", "Pass", "dcgmi diag -r 4")),
     CheckOptions(dcgm_level=4), True, ""),
    # A level 1 pass (the default) never ran the level 3 memory test that failed.
    (checks_of(passed("dcgm.diag", "Pass", "Pass", "dcgmi diag -r 1")),
     CheckOptions(dcgm_level=1), False,
     "drained for dcgm.diag at --dcgm-level 3; this run's level 1 does not run"),
])
def test_a_check_drain_is_lifted_only_by_a_check_that_passed_what_drained_it(
        checks: NodeChecks, options: CheckOptions, resumed: bool, why: str) -> None:
    node, owner = check_drained()
    good = node_verdicts({"n1": checks})["n1"]
    assert good.state is NodeState.GOOD
    action = decide(good, node, SlurmOptions(resume=True), CHECK, owner,
                    check_mark(checks, options))
    assert action is not None
    assert action.action == ("resume" if resumed else "skip"), action.reason
    assert why in action.reason
    # Naming the reason does not make a weaker check any stronger.
    named = decide(good, node, SlurmOptions(resume=True, resume_reason="^nodetune check "),
                   CHECK, owner, check_mark(checks, options))
    assert named is not None and named.action == action.action


def test_a_check_drain_is_not_lifted_by_a_run_that_checked_nothing_on_the_node() -> None:
    node, owner = check_drained()
    good = NodeVerdict("n1", NodeState.GOOD, "pair with n2 passed")
    action = decide(good, node, SlurmOptions(resume=True, resume_reason="^nodetune check "),
                    VALIDATE, owner, PassMark(0.05, 4 * MiB))
    assert action is not None and action.action == "skip"
    assert "this run checked nothing on the node" in action.reason


@pytest.mark.parametrize(("options", "resumed"), [
    (STATE_ONLY, False),
    (CheckOptions(allreduce=False), False),   # --skip-allreduce
    (CheckOptions(dcgm_level=0), False),
    (CheckOptions(), True),                   # every active check ran
])
def test_a_check_drain_recorded_before_its_checks_needs_a_run_that_skipped_no_active_check(
        options: CheckOptions, resumed: bool) -> None:
    node, owner = check_drained(legacy=True)
    checks = checks_of(passed("dcgm.diag", "Pass", "Pass", "dcgmi diag -r 1"))
    action = decide(node_verdicts({"n1": checks})["n1"], node, SlurmOptions(resume=True),
                    CHECK, owner, check_mark(checks, options))
    assert action is not None and action.action == ("resume" if resumed else "skip"), action
    if not resumed:
        assert "does not name the checks that failed" in action.reason


# --- the check verb end to end: `sinfo` stood in (tests/unit/test_slurm_busy.py), the
# checks for real on this machine.


@pytest.fixture()
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", fake.path)
    return fake


@pytest.mark.parametrize(("recorded", "why"), [
    ({"failed_checks": ["dcgm.diag"]}, "drained for dcgm.diag, which this run did not pass"),
    ({}, "does not name the checks that failed"),   # a record from before they were
])
def test_check_resume_with_dcgm_level_0_does_not_lift_a_dcgm_diag_drain(
        tmp_path: Path, runs_dir: Path, fake_slurm: FakeSlurm, recorded: dict[str, Any],
        why: str) -> None:
    reason = drain_reason("dcgm.diag (Fail: Memory, expected every test of level 3 Pass)",
                          kind="check", run_id=CHECK_DRAIN_RUN.id)
    drained = json.loads(sinfo_doc(set(), ("nt-slurm-2",)))
    drained["nodes"][0].update(state_flags=["DRAIN"], reason=reason,
                               reason_changed_at=int(BEFORE))
    fake_slurm.states(json.dumps(drained))
    record = runs_dir / CHECK_DRAIN_RUN.id / "report.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"run_id": CHECK_DRAIN_RUN.id, "verb": "check", "slurm": {
        "controller": "localhost", "actions": [
            {"node": "here", "slurm_node": "nt-slurm-2", "action": "drain", "reason": reason,
             "command": [], "dry_run": False, "state_after": "IDLE+DRAIN", **recorded}]}}))
    inv = busy_inventory(tmp_path, here={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-2"})
    res = run_nodetune("check", str(inv), "--json", "--resume", "--dry-run", "--dcgm-level",
                       "0", "--skip-allreduce", runs_dir=runs_dir, env={"PATH": fake_slurm.path})
    doc = res.json()
    assert doc["nodes"]["here"]["verdict"] == "good", res.stdout + res.stderr
    (action,) = doc["slurm"]["actions"]
    assert action["action"] == "skip" and not action["command"], action
    assert why in action["reason"], action
