"""Slurm drain/resume: reasons, commands, Slurm's JSON, ownership, decisions, plan.

The commands themselves run against a real slurmctld in
tests/integration/test_slurm.py; these tests cover what is decided before,
on output captured from the lab's slurmctld 22.05 (tests/fixtures/slurm).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodetune import records
from nodetune.ansible.inventory import Host, Inventory
from nodetune.errors import InputError
from nodetune.records import RunRecord
from nodetune.remote.ssh import CommandResult, shell_command
from nodetune.slurm.act import decide
from nodetune.slurm.model import MAX_REASON_BYTES, SlurmOptions, SlurmPlan
from nodetune.slurm.prepare import busy_nodes, plan, refuse_busy, slurm_name
from nodetune.slurm.reasons import Owner, claimed_owner, drain_command, drain_reason, proven_owner
from nodetune.slurm.scontrol import Scontrol
from nodetune.slurm.state import SlurmNode, parse_jobs, parse_nodes
from nodetune.verdicts import NodeState, NodeVerdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RUN = "20261122T081500Z-check"


def test_reason_names_the_test_and_the_run() -> None:
    assert drain_reason("fabric.mtu[eth1] 1500, expected 9000", kind="check", run_id=RUN) == (
        f"nodetune check {RUN}: fabric.mtu[eth1] 1500, expected 9000")
    assert claimed_owner(drain_reason("x", kind="validate", run_id=RUN)) == \
        Owner(kind="validate", run_id=RUN)


def test_reason_is_one_line_of_printable_characters() -> None:
    reason = drain_reason("line one\nline two\r\n\ttab \x1b[31mred\x00", kind="check",
                          run_id=RUN)
    assert reason == f"nodetune check {RUN}: line one line two tab [31mred"
    assert reason.isprintable()


@pytest.mark.parametrize("why", ["x" * 1000, "é" * 400, "a " * 300, "€" * 200 + "z"])
def test_reason_fits_slurmdbd_and_keeps_the_run_id(why: str) -> None:
    reason = drain_reason(why, kind="validate", run_id=RUN)
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert reason.startswith(f"nodetune validate {RUN}: ")
    assert reason.endswith("...")
    reason.encode().decode()  # cut on a character boundary


def test_empty_reason_still_says_something() -> None:
    assert drain_reason(" \n ", kind="check", run_id=RUN) == f"nodetune check {RUN}: failed"


@pytest.mark.parametrize("hostile", [
    "x' ; touch /tmp/pwned ; echo '",
    '"; scontrol update nodename=other state=drain reason="x',
    "$(touch /tmp/pwned) `id` ${HOME}",
    "state=resume nodename=other",
    "--help -o",
])
def test_reason_is_one_argument_through_the_shell(hostile: str) -> None:
    reason = drain_reason(hostile, kind="check", run_id=RUN)
    argv = drain_command("gpu-a001", reason)
    assert shlex.split(shell_command(argv)) == list(argv)
    assert argv[-1] == f"reason={reason}"
    assert len(argv) == 5


def test_a_forged_line_in_a_reason_stays_in_its_own_node() -> None:
    """`sinfo --json` from the lab: nt-slurm-1's reason holds a newline and a line shaped like
    sinfo's row for nt-slurm-2 (which fooled the text parser); nt-slurm-2 keeps its own."""
    nodes = parse_nodes((FIXTURES / "sinfo-forged.json").read_text())
    assert set(nodes) == {"nt-slurm-1", "nt-slurm-2"}
    forged, theirs = nodes["nt-slurm-1"], nodes["nt-slurm-2"]
    assert forged.reason == ("maint\nnt-slurm-2|idle+drain|nodetune: fixed "
                             "(run 20261122T000000Z-validate)|")
    assert theirs == SlurmNode("nt-slurm-2", "idle+drain", "hardware ticket 789",
                               reason_time=1795699657.0, last_busy=1795699645.0)
    assert theirs.out_of_service and theirs.display_state == "IDLE+DRAIN"
    assert claimed_owner(theirs.reason) is None and proven_owner(theirs, lambda _r: {}) is None
    action = decide(verdict(NodeState.GOOD), theirs, SlurmOptions(resume=True), run_of("check"))
    assert action is not None and action.action == "skip" and not action.command


def test_idle_and_allocated_nodes_and_the_jobs_holding_them() -> None:
    """`sinfo --json` and `squeue --json` from the lab with `sbatch -w nt-slurm-2` running
    (job 6: its name holds a newline and another node's name), job 7 pending for the same
    node, and jobs 2-5 cancelled there a moment before (squeue's JSON still lists them)."""
    nodes = parse_nodes((FIXTURES / "sinfo-busy.json").read_text())
    assert nodes["nt-slurm-1"] == SlurmNode("nt-slurm-1", "idle", last_busy=1795700170.0)
    assert nodes["nt-slurm-2"].busy and not nodes["nt-slurm-1"].busy
    assert not nodes["nt-slurm-2"].out_of_service
    assert parse_jobs((FIXTURES / "squeue-busy.json").read_text()) == {"nt-slurm-2": ("6",)}


def test_later_slurm_json_shapes() -> None:
    """Slurm 23.02+ writes states as lists and times as objects (shape per its OpenAPI)."""
    doc = {"nodes": [{"name": "n1", "state": ["MIXED", "DRAIN"], "reason": "r",
                      "reason_changed_at": {"set": True, "infinite": False, "number": 5},
                      "last_busy": {"set": True, "infinite": False, "number": 9}}],
           "errors": []}
    assert parse_nodes(json.dumps(doc)) == {"n1": SlurmNode("n1", "mixed+drain", "r", 5.0,
                                                            last_busy=9.0)}
    jobs = {"jobs": [{"job_id": 7, "job_state": ["RUNNING"],
                      "job_resources": {"nodes": {"allocation": [{"name": "n1"}]}}},
                     {"job_id": 8, "job_state": ["COMPLETED"],
                      "job_resources": {"nodes": {"allocation": [{"name": "n1"}]}}},
                     {"job_id": 9, "job_state": ["PENDING"], "job_resources": {}}],
            "errors": []}
    assert parse_jobs(json.dumps(jobs)) == {"n1": ("7",)}


@pytest.mark.parametrize("text", ["sinfo: error: munge", "[]", '{"errors": ["no slurm"]}',
                                  '{"errors": []}'])
def test_slurm_json_that_is_not_a_node_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="sinfo --json"):
        parse_nodes(text)


def test_state_flags() -> None:
    assert SlurmNode("n", "down*+drain").flags == {"down", "drain"}
    assert SlurmNode("n", "mixed+drain").out_of_service
    assert SlurmNode("n", "mixed+drain").busy
    assert not SlurmNode("n", "idle").out_of_service
    assert SlurmNode("n", "down").out_of_service


def run_of(verb: str, stamp: str = "20261122T090000Z") -> RunRecord:
    return RunRecord(path=Path("runs") / f"{stamp}-{verb}", verb=verb,
                     started=datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))


VALIDATE_RUN = "20261122T081500Z-validate"
DRAINED_BY_VALIDATE = drain_reason("busbw 0.02 < 0.05", kind="validate", run_id=VALIDATE_RUN)


def drained(reason: str, when: float | None = None) -> SlurmNode:
    return SlurmNode("n1", "idle+drain", reason, reason_time=when)


def record_of(run_id: str, verb: str, node: str, reason: str, **extra: Any) -> dict[str, Any]:
    return {"run_id": run_id, "verb": verb,
            "slurm": {"controller": "ctl", "actions": [
                {"node": node, "slurm_node": node, "action": "drain", "reason": reason,
                 "command": [], "dry_run": False, "state_after": "IDLE+DRAIN", **extra}]}}


def test_ownership_is_proven_by_this_sites_run_record() -> None:
    node = drained(DRAINED_BY_VALIDATE)
    good = record_of(VALIDATE_RUN, "validate", "n1", DRAINED_BY_VALIDATE)
    assert proven_owner(node, {VALIDATE_RUN: good}.get) == Owner("validate", VALIDATE_RUN)
    assert proven_owner(node, lambda _run_id: None) is None        # no such run here
    for forged in (record_of(VALIDATE_RUN, "check", "n1", DRAINED_BY_VALIDATE),
                   record_of(VALIDATE_RUN, "validate", "n2", DRAINED_BY_VALIDATE),
                   record_of(VALIDATE_RUN, "validate", "n1", "nodetune validate x: other"),
                   record_of(VALIDATE_RUN, "validate", "n1", DRAINED_BY_VALIDATE, dry_run=True),
                   record_of(VALIDATE_RUN, "validate", "n1", DRAINED_BY_VALIDATE, error="x"),
                   {"run_id": VALIDATE_RUN, "verb": "validate"}):
        assert proven_owner(node, {VALIDATE_RUN: forged}.get) is None, forged
    # The old prefix alone, or a prose mention, claims nothing.
    assert claimed_owner(f"nodetune: slow (run {VALIDATE_RUN})") is None
    assert claimed_owner(f"maintenance nodetune validate {VALIDATE_RUN}: x") is None


def test_find_run_is_exact(tmp_path: Path) -> None:
    rec = records.new_run("validate", root=tmp_path)
    rec.write({"status": "pass"})
    assert records.find_run(rec.id, root=tmp_path)["verb"] == "validate"  # type: ignore[index]
    for name in (rec.id[:10], "..", "../runs", "", rec.id + "/.."):
        assert records.find_run(name, root=tmp_path) is None


IDLE = SlurmNode("n1", "idle")
THEIRS = SlurmNode("n1", "idle+drain", "hardware ticket 123")


def verdict(state: NodeState, reason: str = "why") -> NodeVerdict:
    return NodeVerdict("n1", state, reason)


CHECK = run_of("check")


def test_bad_node_is_drained() -> None:
    action = decide(verdict(NodeState.BAD, "busbw 0.02 < 0.05"), IDLE,
                    SlurmOptions(drain=True), run_of("validate"))
    assert action is not None and action.action == "drain"
    assert action.command == ("scontrol", "update", "nodename=n1", "state=drain",
                              "reason=nodetune validate 20261122T090000Z-validate: "
                              "busbw 0.02 < 0.05")


@pytest.mark.parametrize("state", [NodeState.UNRESOLVED, NodeState.UNREACHABLE])
def test_unresolved_and_unreachable_need_drain_unreachable(state: NodeState) -> None:
    skipped = decide(verdict(state), IDLE, SlurmOptions(drain=True), CHECK)
    assert skipped is not None and skipped.action == "skip" and not skipped.command
    drained_ = decide(verdict(state), IDLE,
                      SlurmOptions(drain=True, drain_unreachable=True), CHECK)
    assert drained_ is not None and drained_.action == "drain"


def test_good_node_is_not_drained() -> None:
    assert decide(verdict(NodeState.GOOD), IDLE, SlurmOptions(drain=True), CHECK) is None


def test_drain_never_overwrites_an_operators_reason() -> None:
    action = decide(verdict(NodeState.BAD), THEIRS, SlurmOptions(drain=True), CHECK)
    assert action is not None and action.action == "skip"
    assert "hardware ticket 123" in action.reason


def test_check_never_overwrites_a_validate_drain() -> None:
    """Overwriting would hand validate's drain to check, whose pass could then lift it."""
    owner = Owner("validate", VALIDATE_RUN)
    node = drained(DRAINED_BY_VALIDATE)
    action = decide(verdict(NodeState.BAD), node, SlurmOptions(drain=True), CHECK, owner)
    assert action is not None and action.action == "skip" and not action.command
    assert f"drained by nodetune validate {VALIDATE_RUN}" in action.reason
    again = decide(verdict(NodeState.BAD), node, SlurmOptions(drain=True), run_of("validate"),
                   owner)
    assert again is not None and again.action == "drain"


def test_a_check_pass_never_lifts_a_validate_drain() -> None:
    # (a validate drain that judged no bandwidth: tests/unit/test_slurm_policy.py has those
    # that did)
    owner = Owner("validate", VALIDATE_RUN, mark=None, mark_recorded=True)
    node = drained(DRAINED_BY_VALIDATE, when=1.0)
    action = decide(verdict(NodeState.GOOD), node, SlurmOptions(resume=True), CHECK, owner)
    assert action is not None and action.action == "skip" and not action.command
    assert "only a passing `nodetune validate`" in action.reason
    action = decide(verdict(NodeState.GOOD), node, SlurmOptions(resume=True),
                    run_of("validate"), owner)
    assert action is not None and action.action == "resume"
    assert action.command == ("scontrol", "update", "nodename=n1", "state=resume")
    # The operator's --resume-reason may lift it from either.
    action = decide(verdict(NodeState.GOOD), node,
                    SlurmOptions(resume=True, resume_reason="^nodetune validate "), CHECK, owner)
    assert action is not None and action.action == "resume"


def test_only_a_pass_newer_than_the_drain_lifts_it() -> None:
    later = run_of("validate")
    owner = Owner("validate", VALIDATE_RUN)
    after_start = drained(DRAINED_BY_VALIDATE, when=later.started.timestamp() + 5)
    action = decide(verdict(NodeState.GOOD), after_start, SlurmOptions(resume=True), later,
                    owner)
    assert action is not None and action.action == "skip"
    assert "drained after this run started" in action.reason


def test_an_unproven_nodetune_reason_is_not_resumed() -> None:
    for reason in (DRAINED_BY_VALIDATE, f"nodetune: slow (run {VALIDATE_RUN})"):
        action = decide(verdict(NodeState.GOOD), drained(reason), SlurmOptions(resume=True),
                        run_of("validate"), None)
        assert action is not None and action.action == "skip" and not action.command


def test_resume_never_touches_other_reasons_but_lists_them() -> None:
    action = decide(verdict(NodeState.GOOD), THEIRS, SlurmOptions(resume=True), CHECK)
    assert action is not None and action.action == "skip" and not action.command
    assert "hardware ticket 123" in action.reason


def test_resume_reason_regex_widens_what_is_resumed() -> None:
    maint = SlurmNode("n1", "idle+drain", "maintenance OS upgrade", reason_time=1.0)
    action = decide(verdict(NodeState.GOOD), maint,
                    SlurmOptions(resume=True, resume_reason="^maintenance"), CHECK)
    assert action is not None and action.action == "resume"


def test_resume_needs_a_good_verdict() -> None:
    action = decide(verdict(NodeState.UNRESOLVED), drained(DRAINED_BY_VALIDATE),
                    SlurmOptions(resume=True), run_of("validate"), Owner("validate", VALIDATE_RUN))
    assert action is not None and action.action == "skip"


def test_resume_of_a_node_in_service_does_nothing() -> None:
    assert decide(verdict(NodeState.GOOD), IDLE, SlurmOptions(resume=True), CHECK) is None


def test_dry_run_is_marked() -> None:
    action = decide(verdict(NodeState.BAD), IDLE, SlurmOptions(drain=True, dry_run=True), CHECK)
    assert action is not None and action.dry_run and action.command


class FixtureSession:
    """Stands in for the SSH session to the controller: answers from captured lab output."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, **_kw: Any) -> CommandResult:
        self.asked.append(list(argv))
        return CommandResult(0, (FIXTURES / self.answers[argv[0]]).read_text(), "")

    def close(self) -> None:
        pass


def test_busy_nodes_are_refused_with_their_job_ids() -> None:
    session = FixtureSession({"sinfo": "sinfo-busy.json", "squeue": "squeue-busy.json"})
    scontrol = Scontrol(session, "nt-slurm-1")  # type: ignore[arg-type]
    p = SlurmPlan(options=SlurmOptions(), controller=None,
                  names={"gpu-1": "nt-slurm-1", "gpu-2": "nt-slurm-2"})
    busy = busy_nodes(p.names, scontrol.nodes(list(p.names.values())), scontrol)
    assert [(b.node, b.slurm_node, b.state, b.jobs) for b in busy] == \
        [("gpu-2", "nt-slurm-2", "ALLOCATED", ("6",))]
    assert session.asked == [["sinfo", "--json"], ["squeue", "--json"]]
    with pytest.raises(InputError, match=r"gpu-2 \(ALLOCATED: job 6\).*--allow-busy") as exc:
        refuse_busy(busy, "nt-slurm-1")
    assert exc.value.host == "gpu-2"
    # Idle nodes only: squeue is not even asked.
    session.asked.clear()
    idle = SlurmPlan(options=SlurmOptions(), controller=None, names={"gpu-1": "nt-slurm-1"})
    assert busy_nodes(idle.names, scontrol.nodes(["nt-slurm-1"]), scontrol) == ()
    assert session.asked == [["sinfo", "--json"]]


@pytest.mark.parametrize("options, message", [
    (SlurmOptions(drain_unreachable=True), "--drain-unreachable"),
    (SlurmOptions(resume_reason="x"), "--resume-reason"),
    (SlurmOptions(dry_run=True), "--dry-run"),
    (SlurmOptions(resume=True, resume_reason="(unclosed"), "regular expression"),
])
def test_options_reject_nonsense(options: SlurmOptions, message: str) -> None:
    with pytest.raises(InputError, match=message):
        options.check()


def host(name: str, **variables: object) -> Host:
    return Host(name=name, groups=("gpu_nodes",), vars=variables)


@pytest.mark.parametrize("bad", ["gpu[1-8]", "a,b", "a b", "x=y", "-n", "", "a;b", "é"])
def test_slurm_name_rejects_lists_and_words(bad: str) -> None:
    with pytest.raises(InputError, match="nodetune_slurm_nodename"):
        slurm_name(host("n1", nodetune_slurm_nodename=bad))


def test_slurm_name_defaults_to_inventory_name() -> None:
    assert slurm_name(host("gpu-a001.cluster")) == "gpu-a001.cluster"
    assert slurm_name(host("n1", nodetune_slurm_nodename="gpu-a001")) == "gpu-a001"


def test_plan_local_controller_by_default() -> None:
    hosts = (host("n1"), host("n2", nodetune_slurm_nodename="node2"))
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",))
    p = plan(inv, hosts, SlurmOptions(drain=True))
    assert p.controller is None and p.where == "local"
    assert p.names == {"n1": "n1", "n2": "node2"}


def test_plan_controller_is_an_inventory_host() -> None:
    hosts = (host("n1", nodetune_slurm_controller="ctl"), host("ctl"))
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",))
    assert plan(inv, hosts[:1], SlurmOptions(drain=True)).where == "ctl"


def test_plan_rejects_unknown_or_conflicting_controller() -> None:
    hosts = (host("n1", nodetune_slurm_controller="nope"),)
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",))
    with pytest.raises(InputError, match="nodetune_slurm_controller 'nope'"):
        plan(inv, hosts, SlurmOptions(drain=True))
    two = (host("n1", nodetune_slurm_controller="a"), host("n2", nodetune_slurm_controller="b"))
    with pytest.raises(InputError, match="differs"):
        plan(Inventory(source=Path("inv"), hosts=two, groups=()), two, SlurmOptions(drain=True))


def test_plan_rejects_two_hosts_on_one_slurm_node() -> None:
    hosts = (host("n1", nodetune_slurm_nodename="x"), host("n2", nodetune_slurm_nodename="x"))
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=())
    with pytest.raises(InputError, match="several hosts"):
        plan(inv, hosts, SlurmOptions(drain=True))


def test_a_plan_for_some_of_its_hosts_is_what_planning_them_alone_gives() -> None:
    hosts = (host("n1", nodetune_slurm_controller="ctl"), host("n2", nodetune_slurm_nodename="x"),
             host("n3", nodetune_slurm_controller="ctl"), host("ctl"))
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",))
    everyone = plan(inv, hosts[:3], SlurmOptions(drain=True))
    for some in ([hosts[2], hosts[0]], [hosts[1]], [hosts[1], hosts[0]], []):
        alone = plan(inv, some, SlurmOptions())
        narrowed = everyone.only(some, SlurmOptions())
        assert narrowed == alone and list(narrowed.names) == list(alone.names)
    assert everyone.only(hosts[:1]).options == SlurmOptions(drain=True)
    with pytest.raises(ValueError, match="ctl"):
        everyone.only(hosts)


def test_a_lone_pair_never_blames_one_node() -> None:
    from nodetune.verdicts import pair_verdicts

    passed = pair_verdicts(("a", "b"), passed=True)
    assert {v.state for v in passed.values()} == {NodeState.GOOD}
    failed = pair_verdicts(("a", "b"), passed=False, reason="busbw 0.02 < 0.05")
    assert {v.state for v in failed.values()} == {NodeState.UNRESOLVED}
    assert "cannot tell" in failed["a"].reason and failed["a"].partners == ("b",)
    fault = pair_verdicts(("a", "b"), passed=None, reason="ssh refused", culprit="b")
    assert fault["b"].state is NodeState.UNREACHABLE and fault["a"].state is NodeState.UNRESOLVED


def test_no_slurm_here_means_no_busy_check_and_nothing_contacted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import nodetune.slurm.prepare as slurm_mod

    def no_connection(*_a: object, **_k: object) -> None:
        raise AssertionError("Slurm was contacted")

    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(slurm_mod, "connect", no_connection)
    hosts = (host("n1"), host("n2"))
    inv = Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",))
    assert not slurm_mod.configured(hosts)
    assert slurm_mod.prepare(inv, hosts, SlurmOptions(), busy=hosts).plan is None
    with_ctl = (host("n1", nodetune_slurm_controller="ctl"),)
    assert slurm_mod.configured(with_ctl)
    assert slurm_mod.prepare(inv, with_ctl, SlurmOptions(allow_busy=True),
                             busy=with_ctl).plan is None


def _prepare_on_fixtures(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[SlurmPlan]]:
    """nodetune.slurm.prepare with Slurm answering from the lab's captured output (gpu-1
    idle as nt-slurm-1, gpu-2 allocated to job 6 as nt-slurm-2); the plans it connected
    with are listed."""
    from contextlib import contextmanager

    import nodetune.slurm.prepare as slurm_mod

    connected: list[SlurmPlan] = []

    @contextmanager
    def connect(asked: SlurmPlan) -> Any:
        connected.append(asked)
        session = FixtureSession({"sinfo": "sinfo-busy.json", "squeue": "squeue-busy.json"})
        yield Scontrol(session, asked.where)  # type: ignore[arg-type]

    monkeypatch.setattr(slurm_mod, "connect", connect)
    return slurm_mod, connected


def _fixture_hosts(**more: Any) -> tuple[Inventory, tuple[Host, ...]]:
    ctl = {"nodetune_slurm_controller": "ctl", **more}
    hosts = (host("gpu-1", nodetune_slurm_nodename="nt-slurm-1", **ctl),
             host("gpu-2", nodetune_slurm_nodename="nt-slurm-2", **ctl))
    return Inventory(source=Path("inv"), hosts=(*hosts, host("ctl")), groups=()), hosts


def test_prepare_decides_once_what_is_rechecked_after_a_run_over_ssh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slurm_mod, connected = _prepare_on_fixtures(monkeypatch)
    inv, hosts = _fixture_hosts()
    idle = hosts[:1]
    over_ssh = slurm_mod.prepare(inv, idle, SlurmOptions(), busy=idle)
    assert over_ssh.recheck == SlurmPlan(SlurmOptions(), inv.hosts[2], {"gpu-1": "nt-slurm-1"})
    assert over_ssh.plan is None and over_ssh.launcher is None
    assert over_ssh.seen["nt-slurm-1"].name == "nt-slurm-1" and len(connected) == 1
    # --launcher slurm holds its nodes: Slurm is asked (busy nodes are refused) but
    # nothing is re-checked; the launcher's plan is the same resolution's.
    held = slurm_mod.prepare(inv, idle, SlurmOptions(), busy=idle, launcher=idle)
    assert held.recheck is None and held.launcher == over_ssh.recheck
    # --allow-busy: neither refused nor re-checked, nothing contacted
    assert slurm_mod.prepare(inv, hosts, SlurmOptions(allow_busy=True), busy=hosts) == \
        slurm_mod.Prepared()
    assert len(connected) == 2
    with pytest.raises(InputError, match=r"gpu-2 \(ALLOCATED: job 6\)"):
        slurm_mod.prepare(inv, hosts, SlurmOptions(), busy=hosts)


def test_the_launchers_plan_is_checked_before_slurm_is_contacted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slurm_mod, connected = _prepare_on_fixtures(monkeypatch)
    inv, hosts = _fixture_hosts(nodetune_slurm_controller="")
    with pytest.raises(InputError, match="--launcher slurm needs nodetune_slurm_controller") \
            as exc:
        slurm_mod.prepare(inv, hosts, SlurmOptions(drain=True), busy=hosts, launcher=hosts)
    assert exc.value.host == "gpu-1" and connected == []
    # Slurm neither touched nor asked about busy nodes: the launcher's plan alone, resolved
    # from the inventory without contacting anything.
    inv, hosts = _fixture_hosts()
    only = slurm_mod.prepare(inv, hosts, SlurmOptions(), launcher=hosts)
    assert only.launcher is not None and only.launcher.where == "ctl" and connected == []
    assert only.launcher.names == {"gpu-1": "nt-slurm-1", "gpu-2": "nt-slurm-2"}
    assert only.plan is None and only.recheck is None and only.seen == {}


def test_one_rule_names_the_controller() -> None:
    from nodetune.slurm.model import controllers_named
    from nodetune.slurm.scontrol import configured

    named = (host("a", nodetune_slurm_controller="ctl"), host("b", nodetune_slurm_controller=""),
             host("c", nodetune_slurm_controller=None), host("d"))
    assert controllers_named(named) == {"ctl"} and controllers_named(named[1:]) == set()
    assert configured(named[:1])
