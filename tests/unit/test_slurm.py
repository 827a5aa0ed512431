"""Slurm drain/resume: reasons, commands, sinfo parsing, decisions, plan (no scontrol here).

The commands themselves run against a real slurmctld in
tests/integration/test_slurm.py; these tests cover what is decided before.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from nodetune.errors import InputError
from nodetune.inventory import Host, Inventory
from nodetune.slurm import (
    MAX_REASON_BYTES,
    SlurmNode,
    SlurmOptions,
    decide,
    drain_command,
    drain_reason,
    parse_sinfo,
    plan,
    resumable,
    slurm_name,
)
from nodetune.ssh import shell_command
from nodetune.verdicts import NodeState, NodeVerdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RUN = "20261122T081500Z-check"


def test_reason_has_prefix_and_run_id() -> None:
    assert drain_reason("fabric.mtu[eth1] 1500, expected 9000", RUN) == (
        f"nodetune: fabric.mtu[eth1] 1500, expected 9000 (run {RUN})")


def test_reason_is_one_line_of_printable_characters() -> None:
    reason = drain_reason("line one\nline two\r\n\ttab \x1b[31mred\x00", RUN)
    assert reason == f"nodetune: line one line two tab [31mred (run {RUN})"
    assert reason.isprintable()


@pytest.mark.parametrize("why", ["x" * 1000, "é" * 400, "a " * 300, "€" * 200 + "z"])
def test_reason_fits_slurmdbd_and_keeps_the_run_id(why: str) -> None:
    reason = drain_reason(why, RUN)
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert reason.startswith("nodetune: ")
    assert reason.endswith(f"... (run {RUN})")
    reason.encode().decode()  # cut on a character boundary


def test_empty_reason_still_says_something() -> None:
    assert drain_reason(" \n ", RUN) == f"nodetune: failed (run {RUN})"


@pytest.mark.parametrize("hostile", [
    "x' ; touch /tmp/pwned ; echo '",
    '"; scontrol update nodename=other state=drain reason="x',
    "$(touch /tmp/pwned) `id` ${HOME}",
    "state=resume nodename=other",
    "--help -o",
])
def test_reason_is_one_argument_through_the_shell(hostile: str) -> None:
    reason = drain_reason(hostile, RUN)
    argv = drain_command("gpu-a001", reason)
    assert shlex.split(shell_command(argv)) == list(argv)
    assert argv[-1] == f"reason={reason}"
    assert len(argv) == 5


def test_parse_sinfo_real_output() -> None:
    """`sinfo --Format NodeList:|,StateComplete:|,Reason:|` from the lab's slurmctld 22.05."""
    nodes = parse_sinfo((FIXTURES / "sinfo-registering.txt").read_text())
    assert nodes["nt-slurm-1"] == SlurmNode("nt-slurm-1", "idle+drain", "test x=1 State=IDLE")
    assert nodes["nt-slurm-2"].flags == {"unknown", "not_responding"}
    assert nodes["nt-slurm-2"].reason == ""
    nodes = parse_sinfo((FIXTURES / "sinfo-drained.txt").read_text())
    assert nodes["nt-slurm-1"] == SlurmNode("nt-slurm-1", "idle", "")
    drained = nodes["nt-slurm-2"]
    assert drained.out_of_service and drained.display_state == "IDLE+DRAIN"
    assert drained.reason == "nodetune: a | b = c (run x)"
    nodes = parse_sinfo((FIXTURES / "sinfo-operator.txt").read_text())
    assert nodes["nt-slurm-1"].reason == "hardware ticket 123"
    assert nodes["nt-slurm-1"].out_of_service


def test_state_flags() -> None:
    assert SlurmNode("n", "down*+drain").flags == {"down", "drain"}
    assert SlurmNode("n", "mixed+drain").out_of_service
    assert not SlurmNode("n", "idle").out_of_service
    assert SlurmNode("n", "down").out_of_service


def test_resumable_only_own_reason_or_named_one() -> None:
    assert resumable(f"nodetune: slow (run {RUN})", None)
    assert not resumable("hardware ticket 123", None)
    assert not resumable("maintenance nodetune: x", None)
    assert resumable("maintenance 2026-11 OS upgrade", r"^maintenance ")
    assert not resumable("hardware ticket 123", r"^maintenance ")


IDLE = SlurmNode("n1", "idle")
OURS = SlurmNode("n1", "idle+drain", f"nodetune: slow (run {RUN})")
THEIRS = SlurmNode("n1", "idle+drain", "hardware ticket 123")


def verdict(state: NodeState, reason: str = "why") -> NodeVerdict:
    return NodeVerdict("n1", state, reason)


def test_bad_node_is_drained() -> None:
    action = decide(verdict(NodeState.BAD, "busbw 0.02 < 0.05"), IDLE,
                    SlurmOptions(drain=True), RUN)
    assert action is not None and action.action == "drain"
    assert action.command == ("scontrol", "update", "nodename=n1", "state=drain",
                              f"reason=nodetune: busbw 0.02 < 0.05 (run {RUN})")


@pytest.mark.parametrize("state", [NodeState.UNRESOLVED, NodeState.UNREACHABLE])
def test_unresolved_and_unreachable_need_drain_unreachable(state: NodeState) -> None:
    skipped = decide(verdict(state), IDLE, SlurmOptions(drain=True), RUN)
    assert skipped is not None and skipped.action == "skip" and not skipped.command
    drained = decide(verdict(state), IDLE,
                     SlurmOptions(drain=True, drain_unreachable=True), RUN)
    assert drained is not None and drained.action == "drain"


def test_good_node_is_not_drained() -> None:
    assert decide(verdict(NodeState.GOOD), IDLE, SlurmOptions(drain=True), RUN) is None


def test_drain_never_overwrites_an_operators_reason() -> None:
    action = decide(verdict(NodeState.BAD), THEIRS, SlurmOptions(drain=True), RUN)
    assert action is not None and action.action == "skip"
    assert "hardware ticket 123" in action.reason


def test_resume_own_drain_when_good() -> None:
    action = decide(verdict(NodeState.GOOD), OURS, SlurmOptions(resume=True), RUN)
    assert action is not None and action.action == "resume"
    assert action.command == ("scontrol", "update", "nodename=n1", "state=resume")


def test_resume_never_touches_other_reasons_but_lists_them() -> None:
    action = decide(verdict(NodeState.GOOD), THEIRS, SlurmOptions(resume=True), RUN)
    assert action is not None and action.action == "skip" and not action.command
    assert "hardware ticket 123" in action.reason


def test_resume_reason_regex_widens_what_is_resumed() -> None:
    maint = SlurmNode("n1", "idle+drain", "maintenance OS upgrade")
    action = decide(verdict(NodeState.GOOD), maint,
                    SlurmOptions(resume=True, resume_reason="^maintenance"), RUN)
    assert action is not None and action.action == "resume"


def test_resume_needs_a_good_verdict() -> None:
    action = decide(verdict(NodeState.UNRESOLVED), OURS, SlurmOptions(resume=True), RUN)
    assert action is not None and action.action == "skip"


def test_resume_of_a_node_in_service_does_nothing() -> None:
    assert decide(verdict(NodeState.GOOD), IDLE, SlurmOptions(resume=True), RUN) is None


def test_dry_run_is_marked() -> None:
    action = decide(verdict(NodeState.BAD), IDLE, SlurmOptions(drain=True, dry_run=True), RUN)
    assert action is not None and action.dry_run and action.command


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


def test_a_lone_pair_never_blames_one_node() -> None:
    from nodetune.verdicts import pair_verdicts

    passed = pair_verdicts(("a", "b"), passed=True)
    assert {v.state for v in passed.values()} == {NodeState.GOOD}
    failed = pair_verdicts(("a", "b"), passed=False, reason="busbw 0.02 < 0.05")
    assert {v.state for v in failed.values()} == {NodeState.UNRESOLVED}
    assert "cannot tell" in failed["a"].reason and failed["a"].partners == ("b",)
    fault = pair_verdicts(("a", "b"), passed=None, reason="ssh refused", culprit="b")
    assert fault["b"].state is NodeState.UNREACHABLE and fault["a"].state is NodeState.UNRESOLVED
