"""Drain and resume against a real slurmctld in the lab (Debian's Slurm 22.05, real munge).

No scontrol is mocked: every action goes over SSH to the lab's controller
(node 1) and every assertion reads Slurm's own state back with
`scontrol show node` inside the container.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune import records
from nodetune.ansible.inventory import load
from nodetune.errors import InputError, SlurmError
from nodetune.lab import faults as lab_faults
from nodetune.lab import nodes as lab_mod
from nodetune.lab import slurm as lab_slurm
from nodetune.slurm import act as slurm_act
from nodetune.slurm import model as slurm_model
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm import reasons as slurm_reasons
from nodetune.slurm import scontrol as slurm_scontrol
from nodetune.slurm.policy import CheckMark
from nodetune.verdicts import NodeState, NodeVerdict
from tests.integration.slow_link import SlowLink

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--sizes", "4M", "--iters", "5", "--warmup", "1", "--min-busbw", "0.05"]
OPERATOR_REASON = "hardware ticket 123"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurm_lab(lab: Any) -> Iterator[Any]:
    """The session lab with Slurm added (idempotent: a lab that has it is only checked)."""
    started = time.monotonic()
    lab_mod.up(lab.root, nodes=len(lab.nodes), with_torch=True, with_slurm=True)
    print(f"lab Slurm ready in {time.monotonic() - started:.1f} s")
    yield lab
    for node in lab.nodes:
        lab_faults.clear(node)


@pytest.fixture()
def clean(slurm_lab: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Every lab node IDLE before the test, whatever an earlier test left; run records (the
    proof of which drains nodetune wrote) in the test's own folder, for nodetune's CLI too."""
    monkeypatch.setenv(records.RUNS_ENV, str(tmp_path / "runs"))
    _all_idle(slurm_lab)
    yield slurm_lab
    _all_idle(slurm_lab)  # and after it: the next module's tests find no drain of this one's


def _all_idle(lab: Any) -> None:
    for node in lab.nodes:
        resume(lab, node)
    # A resumed node is IDLE+NOT_RESPONDING until slurmctld has pinged it (about a second).
    deadline = time.monotonic() + 60
    while any(show(lab, n)["state"] != "IDLE" for n in lab.nodes):
        assert time.monotonic() < deadline, {n: show(lab, n) for n in lab.nodes}
        time.sleep(0.5)


def ctl(lab: Any) -> str:
    return str(lab.nodes[0])


def show(lab: Any, node: str) -> dict[str, str]:
    """State and Reason from `scontrol show node -o` (Reason is the last field there)."""
    line = lab.sh(ctl(lab), "scontrol", "show", "node", "-o", node)
    state = re.search(r" State=(\S+)", line)
    reason = re.search(r" Reason=(.*) \[[^\]]*@[^\]]*\]\s*$", line)
    return {"state": state.group(1) if state else "?", "reason": reason.group(1) if reason else ""}


def drain(lab: Any, node: str, reason: str) -> None:
    lab.sh(ctl(lab), "scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")


def resume(lab: Any, node: str) -> None:
    if "DRAIN" in show(lab, node)["state"] or "DOWN" in show(lab, node)["state"]:
        lab.sh(ctl(lab), "scontrol", "update", f"nodename={node}", "state=resume")


def splan(lab: Any, **options: Any) -> slurm_model.SlurmPlan:
    inv = load(lab.inventory)
    return slurm_prepare.plan(inv, inv.hosts, slurm_model.SlurmOptions(**options))


def act(lab: Any, verdicts: dict[str, NodeVerdict], verb: str = "check",
        **options: Any) -> tuple[slurm_model.SlurmReport, records.RunRecord]:
    """Drain/resume as `nodetune <verb>` does: in a run with its own record, which keeps the
    Slurm actions (the proof that this run drained a node). A check run passes what it
    found on each node (its CheckMark): a check drain is lifted only by a check that
    passed the checks that drained it; these drains record none, so any check passes."""
    rec = records.new_run(verb)
    marks = {n: CheckMark(results=(("software.versions", "pass"),))
             for n in verdicts} if verb == "check" else None
    report = slurm_act.apply_verdicts(splan(lab, **options), verdicts, run=rec, marks=marks)
    rec.write({"status": "test", "slurm": report.to_dict()})
    return report, rec


def test_lab_runs_slurm_with_every_node_idle(slurm_lab: Any) -> None:
    states = lab_slurm.sinfo(ctl(slurm_lab))
    assert set(slurm_lab.nodes) <= set(states)
    for node in slurm_lab.nodes:
        assert show(slurm_lab, node)["state"] in ("IDLE", "IDLE+DRAIN"), show(slurm_lab, node)
    inv = load(slurm_lab.inventory)
    assert {h.vars.get("nodetune_slurm_controller") for h in inv.hosts} == {ctl(slurm_lab)}
    for node in slurm_lab.nodes:
        assert slurm_lab.sh(node, "systemctl", "is-active", "munge", "slurmd") == \
            "active\nactive"
        assert slurm_lab.sh(node, "sha256sum", "/etc/munge/munge.key").split()[0] == \
            slurm_lab.sh(ctl(slurm_lab), "sha256sum", "/etc/munge/munge.key").split()[0]


def test_hostile_reason_drains_one_node_verbatim_over_ssh(clean: Any) -> None:
    bad, good = clean.nodes[0], clean.nodes[1]
    hostile = ("mtu 1500'; touch /tmp/pwned; echo ' $(touch /tmp/pwned2) `id` "
               '" nodename=' + good + ' state=resume reason="x\nsecond line | a=b')
    verdicts = {bad: NodeVerdict(bad, NodeState.BAD, hostile),
                good: NodeVerdict(good, NodeState.GOOD, "pair passed")}
    report, rec = act(clean, verdicts, drain=True)
    assert [a.action for a in report.actions] == ["drain"]
    action = report.actions[0]
    assert action.error is None and action.state_after == "IDLE+DRAIN"
    expected = slurm_reasons.drain_reason(hostile, kind="check", run_id=rec.id)
    assert show(clean, bad) == {"state": "IDLE+DRAIN", "reason": expected}
    assert show(clean, good)["state"] == "IDLE"
    for node in clean.nodes:
        assert clean.sh(node, "sh", "-c", "ls /tmp/pwned* 2>/dev/null || true") == ""


def test_reason_of_255_bytes_is_kept_whole(clean: Any) -> None:
    bad = clean.nodes[1]
    verdicts = {bad: NodeVerdict(bad, NodeState.BAD, "é" * 300)}
    report, _ = act(clean, verdicts, drain=True)
    reason = report.actions[0].reason
    assert len(reason.encode()) <= 255
    assert show(clean, bad)["reason"] == reason


def test_unresolved_is_not_drained_without_drain_unreachable(clean: Any) -> None:
    a, b = clean.nodes[0], clean.nodes[1]
    verdicts = {a: NodeVerdict(a, NodeState.UNRESOLVED, "pair failed"),
                b: NodeVerdict(b, NodeState.UNREACHABLE, "ssh refused")}
    report, _ = act(clean, verdicts, drain=True)
    assert [x.action for x in report.actions] == ["skip", "skip"]
    assert [show(clean, n)["state"] for n in (a, b)] == ["IDLE", "IDLE"]
    report, _ = act(clean, verdicts, drain=True, drain_unreachable=True)
    assert [x.action for x in report.actions] == ["drain", "drain"]
    assert [show(clean, n)["state"] for n in (a, b)] == ["IDLE+DRAIN", "IDLE+DRAIN"]


def test_resume_returns_only_nodetune_drains_and_lists_the_rest(clean: Any) -> None:
    ours, theirs = clean.nodes[0], clean.nodes[1]
    act(clean, {ours: NodeVerdict(ours, NodeState.BAD, "busbw 0.02 < 0.05")}, drain=True)
    drain(clean, theirs, OPERATOR_REASON)
    verdicts = {n: NodeVerdict(n, NodeState.GOOD, "passed") for n in (ours, theirs)}
    # --drain on a bad verdict does not overwrite the operator's reason either.
    report, _ = act(clean, {theirs: NodeVerdict(theirs, NodeState.BAD, "slow")}, drain=True)
    assert report.actions[0].action == "skip"
    assert show(clean, theirs)["reason"] == OPERATOR_REASON
    report, _ = act(clean, verdicts, resume=True)
    by_node = {a.node: a for a in report.actions}
    assert by_node[ours].action == "resume" and by_node[ours].state_after == "IDLE"
    assert by_node[theirs].action == "skip" and OPERATOR_REASON in by_node[theirs].reason
    assert show(clean, ours)["state"] == "IDLE"
    assert show(clean, theirs) == {"state": "IDLE+DRAIN", "reason": OPERATOR_REASON}
    # The operator's maintenance reason, named, is resumed.
    report, _ = act(clean, verdicts, resume=True, resume_reason="^hardware ticket")
    assert [a.action for a in report.actions] == ["resume"]
    assert show(clean, theirs)["state"] == "IDLE"


def test_dry_run_changes_nothing(clean: Any) -> None:
    bad, drained = clean.nodes[0], clean.nodes[1]
    first, _ = act(clean, {drained: NodeVerdict(drained, NodeState.BAD, "x")}, drain=True)
    verdicts = {bad: NodeVerdict(bad, NodeState.BAD, "slow"),
                drained: NodeVerdict(drained, NodeState.GOOD, "ok")}
    report, _ = act(clean, verdicts, drain=True, resume=True, dry_run=True)
    assert {(a.action, a.dry_run) for a in report.actions} == {("drain", True), ("resume", True)}
    assert all(a.command for a in report.actions)
    assert show(clean, bad)["state"] == "IDLE"
    assert show(clean, drained) == {"state": "IDLE+DRAIN", "reason": first.actions[0].reason}


def test_unknown_slurm_name_is_bad_input_before_anything_runs(clean: Any, tmp_path: Path) -> None:
    inv = load(clean.inventory)
    p = slurm_prepare.plan(inv, inv.hosts, slurm_model.SlurmOptions(drain=True))
    p = slurm_model.SlurmPlan(options=p.options, controller=p.controller,
                        names={clean.nodes[0]: "no-such-node"})
    with slurm_scontrol.connect(p) as scontrol, pytest.raises(InputError, match="no-such-node"):
        slurm_scontrol.preflight(p, scontrol)


def validate(inventory: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([str(NODETUNE), "validate", str(inventory), *FAST, "--json", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_validate_drains_a_slowed_pair_and_resume_returns_it(clean: Any) -> None:
    """Slowed fabric link → FAIL → --drain-unreachable drains (a pair cannot tell which node),
    an operator's drain survives both; after the fault is cleared, --resume returns the node."""
    a, slow = clean.nodes[0], clean.nodes[1]
    drain(clean, a, OPERATOR_REASON)
    lab_faults.apply(slow, "slow-link")
    try:
        code, doc, err = validate(clean.inventory, "--drain")
        assert code == 1, err
        assert {n["verdict"] for n in doc["nodes"].values()} == {"unresolved"}
        assert [x["action"] for x in doc["slurm"]["actions"]] == ["skip", "skip"]
        assert show(clean, slow)["state"] == "IDLE"
        code, doc, err = validate(clean.inventory, "--drain", "--drain-unreachable")
        assert code == 1, err
    finally:
        lab_faults.apply(slow, "clear")
    actions = {x["node"]: x for x in doc["slurm"]["actions"]}
    assert actions[slow]["action"] == "drain" and actions[slow]["state_after"] == "IDLE+DRAIN"
    assert actions[a]["action"] == "skip"
    shown = show(clean, slow)
    assert shown["state"] == "IDLE+DRAIN"
    assert shown["reason"].startswith(f"nodetune validate {doc['run_id']}: pair with ")
    assert show(clean, a)["reason"] == OPERATOR_REASON

    code, doc, err = validate(clean.inventory, "--resume")
    assert code == 0, err
    actions = {x["node"]: x for x in doc["slurm"]["actions"]}
    assert actions[slow]["action"] == "resume" and actions[slow]["state_after"] == "IDLE"
    assert actions[a]["action"] == "skip" and OPERATOR_REASON in actions[a]["reason"]
    assert show(clean, slow)["state"] == "IDLE"
    assert show(clean, a) == {"state": "IDLE+DRAIN", "reason": OPERATOR_REASON}


def nodetune(*args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([str(NODETUNE), *args, "--json"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_check_drains_a_drifted_mtu_and_resumes_it_after_apply_but_never_a_validate_drain(
        clean: Any) -> None:
    """apply → one node's fabric MTU drifts → check --drain drains it (reason in scontrol) →
    apply → a failing validate drains the other node (and leaves check's drain as it is) →
    check --resume --dry-run changes nothing → check --resume returns the MTU node to IDLE and
    leaves validate's drain (check cannot measure a link) → validate --resume returns it."""
    good, drifted = clean.nodes[0], clean.nodes[1]
    code, doc, err = nodetune("apply", str(clean.inventory))
    assert code == 0, err
    clean.sh(drifted, "ip", "link", "set", "dev", "eth1", "mtu", "1500")
    code, doc, err = nodetune("check", str(clean.inventory), "--drain")
    assert code == 1, err
    assert doc["nodes"][drifted]["verdict"] == "bad" and doc["nodes"][good]["verdict"] == "good"
    (action,) = doc["slurm"]["actions"]
    assert action["node"] == drifted and action["action"] == "drain"
    assert action["state_after"] == "IDLE+DRAIN" and action["dry_run"] is False
    assert action["command"][:4] == ["scontrol", "update", f"nodename={drifted}", "state=drain"]
    shown = show(clean, drifted)
    check_run = doc["run_id"]
    assert shown["state"] == "IDLE+DRAIN"
    assert shown["reason"].startswith(f"nodetune check {check_run}: ")
    assert "fabric.mtu[eth1]" in shown["reason"]
    assert show(clean, good)["state"] == "IDLE"

    code, doc, err = nodetune("apply", str(clean.inventory))
    assert code == 0, err
    code, doc, err = validate(clean.inventory, "--min-busbw", "1000", "--drain",
                              "--drain-unreachable")
    assert code == 1, err
    actions = {x["node"]: x for x in doc["slurm"]["actions"]}
    assert actions[good]["action"] == "drain"
    assert actions[drifted]["action"] == "skip"
    assert f"drained by nodetune check {check_run}" in actions[drifted]["reason"]
    validate_reason = show(clean, good)["reason"]
    assert validate_reason.startswith(f"nodetune validate {doc['run_id']}: ")
    assert show(clean, drifted)["reason"] == shown["reason"]

    code, doc, err = nodetune("check", str(clean.inventory), "--resume", "--dry-run")
    assert code == 0, err
    actions = {x["node"]: x for x in doc["slurm"]["actions"]}
    assert actions[drifted]["action"] == "resume" and actions[drifted]["dry_run"] is True
    assert actions[good]["action"] == "skip"
    assert show(clean, drifted)["state"] == "IDLE+DRAIN"
    code, doc, err = nodetune("check", str(clean.inventory), "--resume")
    assert code == 0, err
    assert doc["nodes"][good]["verdict"] == "good"
    actions = {x["node"]: x for x in doc["slurm"]["actions"]}
    assert actions[drifted]["action"] == "resume" and actions[drifted]["state_after"] == "IDLE"
    assert actions[good]["action"] == "skip" and not actions[good]["command"]
    assert "only a passing `nodetune validate`" in actions[good]["reason"]
    assert show(clean, drifted)["state"] == "IDLE"
    assert show(clean, good) == {"state": "IDLE+DRAIN", "reason": validate_reason}

    # A validate pass lifts a validate drain only when judged at least as strictly: this
    # drain's mark was 1000 GB/s, so a pass at 0.001 GB/s leaves it, named or not (the
    # lifting pass is test_validate_drains_a_slowed_pair_and_resume_returns_it's).
    for named in ((), ("--resume-reason", "^nodetune validate ")):
        code, doc, err = validate(clean.inventory, "--resume", "--min-busbw", "0.001", *named)
        assert code == 0, err
        (action,) = doc["slurm"]["actions"]
        assert action["node"] == good and action["action"] == "skip", action
        assert "below the drain's 1000 GB/s" in action["reason"]
        assert show(clean, good) == {"state": "IDLE+DRAIN", "reason": validate_reason}


def test_a_forged_status_line_in_a_reason_never_resumes_another_node(clean: Any) -> None:
    """An admin's reason on node 1 holds a newline and a line shaped like sinfo's row for node 2
    with a nodetune-looking reason; node 2 is drained for a hardware ticket. --resume with both
    good resumes neither: node 2's reason is its own, and node 1's names no run of this site."""
    first, second = clean.nodes[0], clean.nodes[1]
    forged = (f"nodetune validate 20261122T000000Z-validate: fixed\n"
              f"{second}|idle+drain|nodetune: fixed (run 20261122T000000Z-validate)|")
    drain(clean, first, forged)
    drain(clean, second, "hardware ticket 789")
    verdicts = {n: NodeVerdict(n, NodeState.GOOD, "passed") for n in (first, second)}
    report, _ = act(clean, verdicts, "validate", resume=True)
    assert [(a.node, a.action) for a in report.actions] == [(first, "skip"), (second, "skip")]
    assert "hardware ticket 789" in report.actions[1].reason
    assert "not a run record of this site" in report.actions[0].reason
    assert show(clean, second) == {"state": "IDLE+DRAIN", "reason": "hardware ticket 789"}
    assert show(clean, first)["state"] == "IDLE+DRAIN"


def _tmp(lab: Any, node: str) -> list[str]:
    """What is in the node's /tmp, less systemd's private directories of its own services
    (PrivateTmp=): they come and go with the services that systemd starts on demand, which
    is systemd's, not nodetune's; nodetune's own leftovers are compared."""
    return [n for n in lab.sh(node, "ls", "/tmp").split() if not n.startswith("systemd-private-")]


def test_validate_refuses_nodes_slurm_has_allocated(clean: Any) -> None:
    """A job holds node 2: validate (pair, and a fleet through --partners) exits 2 naming the
    node and the job, before anything runs on a node; --allow-busy tests it anyway."""
    idle, busy = clean.nodes[0], clean.nodes[1]
    job = clean.sh(ctl(clean), "sbatch", "--parsable", "-w", busy, "-J", "production",
                   "--wrap", "sleep 600").split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while "ALLOCATED" not in show(clean, busy)["state"]:
            assert time.monotonic() < deadline, show(clean, busy)
            time.sleep(0.5)
        before = {n: _tmp(clean, n) for n in clean.nodes}
        code, doc, err = validate(clean.inventory)
        assert code == 2, err
        assert doc["status"] == "error" and "result" not in doc
        message = doc["error"]["message"]
        assert doc["error"]["host"] == busy
        assert f"{busy} (ALLOCATED: job {job})" in message and "--allow-busy" in message
        assert "allocated 1 selected node(s)" in message
        code, doc, err = validate(clean.inventory, "--limit", idle, "--partners", busy)
        assert code == 2, err
        assert f"{busy} (ALLOCATED: job {job})" in doc["error"]["message"]
        # check over SSH (its all_reduce, dcgmi diag, ib_write_bw) follows the same rule
        code, doc, err = nodetune("check", str(clean.inventory))
        assert code == 2, err
        assert doc["error"]["host"] == busy and "checks" not in doc
        assert f"{busy} (ALLOCATED: job {job})" in doc["error"]["message"]
        assert {n: _tmp(clean, n) for n in clean.nodes} == before
        # The job is a sleep: the pair measures and passes (a low mark: the host is shared).
        code, doc, err = validate(clean.inventory, "--allow-busy", "--min-busbw", "0.001")
        assert code == 0, err
        assert doc["status"] == "pass" and doc["result"]["sizes"]
    finally:
        clean.sh(ctl(clean), "scancel", job)
        deadline = time.monotonic() + 60
        while show(clean, busy)["state"] != "IDLE" and time.monotonic() < deadline:
            time.sleep(0.5)


def _validate_launched(lab: Any) -> tuple[subprocess.Popen[str], list[str], SlowLink]:
    """A validate of the lab's pair (--drain, --drain-unreachable, --resume), started and
    read up to its launch line: both nodes measured from here on. The measurement is held
    open without burning the cores: node 1's fabric is rate-limited to 1 Mbit/s from its
    launch until the returned link is released, after which its 100 iterations of 4 MiB
    end within seconds. --timeout 600: a wait is not a stall."""
    proc = subprocess.Popen(
        [str(NODETUNE), "validate", str(lab.inventory), "--sizes", "4M", "--iters", "100",
         "--warmup", "1", "--timeout", "600", "--min-busbw", "0.001", "--drain",
         "--drain-unreachable", "--resume"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO)
    assert proc.stderr is not None
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "launch" in line:
                break
        link = SlowLink(lab.nodes[0], "1mbit").hold()
    except BaseException:
        proc.kill()
        raise
    return proc, lines, link


def test_a_job_starting_mid_measurement_leaves_the_pair_without_verdict(
        clean: Any, tmp_path: Path) -> None:
    """Both nodes idle when validate starts; once its workers are launched a job is given
    node 2: the pair's measurement is no verdict (both unresolved, the job named), and
    neither --drain-unreachable nor --resume touches either node."""
    a, b = clean.nodes[0], clean.nodes[1]
    proc, lines, link = _validate_launched(clean)
    job = None
    try:
        job = clean.sh(ctl(clean), "sbatch", "--parsable", "-w", b, "-J", "production",
                       "--wrap", "sleep 600").split(";")[0]
        deadline = time.monotonic() + 30
        while "ALLOCATED" not in show(clean, b)["state"]:
            assert time.monotonic() < deadline, show(clean, b)
            time.sleep(0.5)
        assert proc.poll() is None, "".join(lines)  # the job arrived during the run
        link.release()
        _, rest = proc.communicate(timeout=300)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job is not None:
            clean.sh(ctl(clean), "scancel", job)
        link.release()
    text = "".join(lines)
    assert proc.returncode == 1, text
    (report,) = (tmp_path / "runs").glob("*-validate/report.json")
    doc = json.loads(report.read_text())
    assert doc["status"] == "unresolved" and doc["result"]["sizes"]
    assert doc["slurm_recheck"]["allocated_during_run"] == {b: [job]}
    for node in (a, b):
        assert doc["nodes"][node]["verdict"] == "unresolved"
        assert f"{b}: allocated to job {job} during the run" in doc["nodes"][node]["reason"]
    assert {x["node"]: x["action"] for x in doc["slurm"]["actions"]} == {a: "skip", b: "skip"}
    assert f"{b} was allocated to job {job} during the run" in " ".join(text.split())
    deadline = time.monotonic() + 60
    while show(clean, b)["state"] != "IDLE" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert show(clean, a) == {"state": "IDLE", "reason": ""}


def test_a_job_that_starts_and_ends_mid_measurement_leaves_the_pair_without_verdict(
        clean: Any, tmp_path: Path) -> None:
    """Both nodes idle when validate starts and again when it ends, but a job ran on node 2
    in between: slurmctld moved the node's last busy time, so the pair's measurement is
    no verdict, and neither --drain-unreachable nor --resume touches either node."""
    a, b = clean.nodes[0], clean.nodes[1]
    proc, lines, link = _validate_launched(clean)
    try:
        job = clean.sh(ctl(clean), "sbatch", "--parsable", "-w", b, "-J", "short",
                       "--wrap", "true").split(";")[0]
        deadline = time.monotonic() + 60
        while clean.sh(ctl(clean), "squeue", "-h", "-j", job, check=False) or \
                show(clean, b)["state"] != "IDLE":
            assert time.monotonic() < deadline, show(clean, b)
            time.sleep(0.5)
        assert proc.poll() is None, "".join(lines)  # the job came and went during the run
        link.release()
        _, rest = proc.communicate(timeout=300)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
        link.release()
    text = "".join(lines)
    assert proc.returncode == 1, text
    (report,) = (tmp_path / "runs").glob("*-validate/report.json")
    doc = json.loads(report.read_text())
    assert doc["status"] == "unresolved" and doc["result"]["sizes"]
    assert doc["slurm_recheck"]["allocated_during_run"] == {}
    assert list(doc["slurm_recheck"]["busy_and_idle_again_during_run"]) == [b], doc
    for node in (a, b):
        assert doc["nodes"][node]["verdict"] == "unresolved"
        assert f"{b}: a job ran on it during the run and had ended by its end" in \
            doc["nodes"][node]["reason"], doc["nodes"][node]
    assert {x["node"]: x["action"] for x in doc["slurm"]["actions"]} == {a: "skip", b: "skip"}
    assert show(clean, a) == {"state": "IDLE", "reason": ""}


def test_fleet_drain_dry_run_changes_nothing_then_drains_only_the_slowed_node(
        clean: Any, tmp_path: Path) -> None:
    """A three-node fleet on the Slurm lab, one node slowed (tc tbf): `validate --drain
    --dry-run` measures, names it bad, prints its scontrol command and leaves Slurm as it was;
    `validate --drain` then drains it, with the reason in `scontrol show node`, and no other."""
    before = len(clean.nodes)
    lab_mod.up(clean.root, nodes=3, with_torch=True, with_slurm=True)
    names = tuple(h.name for h in load(clean.inventory).hosts)
    assert len(names) == 3
    slow = names[2]
    # A seed whose round 1 pairs the two healthy nodes: round 2 meets the slowed node with
    # one that passed, so it is named bad (not unresolved) in two rounds.
    seed = next(s for s in range(50) if slow not in
                [h for p in nodetune("validate", str(clean.inventory), "--plan", "--seed",
                                     str(s))[1]["fleet"]["round_one"] for h in p["hosts"]])
    args = [*FAST, "--skip-checks", "--seed", str(seed), "--drain"]
    lab_faults.apply(slow, "slow-link")
    try:
        report = tmp_path / "dry.json"
        proc = subprocess.run([str(NODETUNE), "validate", str(clean.inventory), *args,
                               "--dry-run", "--report", str(report)], capture_output=True,
                              text=True, timeout=600, cwd=REPO, check=False)
        assert proc.returncode == 1, proc.stderr
        doc = json.loads(report.read_text())
        assert {n: v["verdict"] for n, v in doc["nodes"].items()} == \
            {n: "bad" if n == slow else "good" for n in names}, doc["nodes"]
        (action,) = doc["slurm"]["actions"]
        assert action["node"] == slow and action["action"] == "drain"
        assert action["dry_run"] is True and action["state_after"] == "IDLE"
        assert action["command"][:4] == ["scontrol", "update", f"nodename={slow}",
                                         "state=drain"]
        out = " ".join(proc.stdout.split())
        assert f"would run on {ctl(clean)}:" in out
        assert f"scontrol update nodename={slow} state=drain 'reason=nodetune validate " \
            in out, out
        assert [show(clean, n)["state"] for n in names] == ["IDLE"] * 3

        code, doc, err = nodetune("validate", str(clean.inventory), *args)
        assert code == 1, err
    finally:
        lab_faults.apply(slow, "clear")
    try:
        assert {n: v["verdict"] for n, v in doc["nodes"].items()} == \
            {n: "bad" if n == slow else "good" for n in names}, doc["nodes"]
        (action,) = doc["slurm"]["actions"]
        assert action["node"] == slow and action["action"] == "drain"
        assert action["dry_run"] is False and action["state_after"] == "IDLE+DRAIN"
        shown = show(clean, slow)
        assert shown["state"] == "IDLE+DRAIN"
        assert shown["reason"].startswith(f"nodetune validate {doc['run_id']}: ")
        assert "good" in shown["reason"]
        assert [show(clean, n)["state"] for n in names if n != slow] == ["IDLE"] * 2
    finally:
        lab_mod.up(clean.root, nodes=before, shrink=True, with_torch=True, with_slurm=True)


def test_lab_up_keeps_every_node_and_shrinks_only_when_asked_with_slurm_following(
        clean: Any) -> None:
    """`nodetune lab up` without --nodes on a three-node Slurm lab keeps all three (it used to
    remove one, and slurm.conf kept listing it); --nodes 2 alone is refused with exit 2,
    removing nothing; --nodes 2 --shrink removes the third node and slurmctld forgets it."""
    before = len(clean.nodes)
    lab_mod.up(clean.root, nodes=before + 1, with_torch=True, with_slurm=True)
    third = f"{lab_mod.PREFIX}{before + 1}"

    def lab_up(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(NODETUNE), "lab", "up", *args], capture_output=True,
                              text=True, timeout=600, cwd=clean.root, check=False)

    def running() -> list[str]:
        return [n.name for n in lab_mod.status(clean.root).nodes if n.state == "running"]

    def conf_nodes() -> list[str]:
        conf = clean.sh(ctl(clean), "cat", lab_slurm.CONF)
        return re.findall(r"^NodeName=(\S+)", conf, re.MULTILINE)

    try:
        kept = lab_up()
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert running() == [*clean.nodes, third]
        assert conf_nodes() == [*clean.nodes, third]
        assert [h.name for h in load(clean.inventory).hosts] == [*clean.nodes, third]

        refused = lab_up("--nodes", str(before))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert third in refused.stderr and "--shrink" in refused.stderr
        assert running() == [*clean.nodes, third]
    finally:
        shrunk = lab_up("--nodes", str(before), "--shrink")
    assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
    assert running() == list(clean.nodes)
    assert conf_nodes() == list(clean.nodes)
    assert set(lab_slurm.sinfo(ctl(clean))) == set(clean.nodes)
    assert [h.name for h in load(clean.inventory).hosts] == list(clean.nodes)


def test_bad_input_a_node_reveals_drains_nothing(clean: Any, tmp_path: Path) -> None:
    """An interface the inventory names but the node lacks is bad input (exit 2), found only
    once the node answers: validate --drain --drain-unreachable then drains neither node."""
    a, b = clean.nodes[0], clean.nodes[1]
    inv = tmp_path / "inv"
    shutil.copytree(clean.inventory, inv)
    (inv / "host_vars").mkdir(exist_ok=True)
    (inv / "host_vars" / f"{b}.yml").write_text(
        yaml.safe_dump({"nodetune_socket_ifname": "nosuch0"}))
    code, doc, err = validate(inv, "--limit", f"{a},{b}", "--drain", "--drain-unreachable")
    assert code == 2, err
    assert doc["error"]["host"] == b and "nosuch0" in doc["error"]["message"], doc["error"]
    assert {n: show(clean, n)["state"] for n in (a, b)} == {a: "IDLE", b: "IDLE"}
    assert "slurm" not in doc
    for node in (a, b):  # the probes' workers and temp dirs are gone again
        assert not clean.sh(node, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true")


def test_text_fallback_reads_what_json_reads_from_the_real_slurmctld(clean: Any) -> None:
    """The same slurmctld read twice: `sinfo --json` and, as for a Slurm without --json,
    sinfo/squeue text columns (nodetune/slurm/text.py); a reason with a line break is refused
    by the text reader, never read as another node's row."""
    bad = clean.nodes[1]
    drain(clean, bad, "nodetune check: gpu.count 7|8")
    with slurm_scontrol.connect(splan(clean)) as via_json, \
            slurm_scontrol.connect(splan(clean)) as via_text:
        via_text.has_json = False
        by_json, by_text = via_json.nodes([]), via_text.nodes([])
        assert via_json.has_json is True
        assert {n: (v.flags, v.reason) for n, v in by_text.items()} == \
            {n: (v.flags, v.reason) for n, v in by_json.items()}
        assert by_text[bad].out_of_service and by_text[bad].reason == "nodetune check: gpu.count 7|8"
        assert via_text.jobs() == via_json.jobs()
        drain(clean, bad, f"x\n{clean.nodes[0]}|drained|nodetune check: forged")
        with pytest.raises(SlurmError, match="a reason holds a line break"):
            via_text.nodes([])
