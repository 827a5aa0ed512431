"""Nodes Slurm has given to jobs: `check` over SSH refuses them as `validate` does, and a
job that Slurm starts on a node while it is measured leaves that node's measurement (and
its partners') without a verdict, which Slurm neither drains nor resumes.

Slurm's commands are stood in at the edge: `sinfo` and `squeue` on PATH print output
captured from the lab's slurmctld 22.05 (tests/fixtures/slurm; the idle and four-node
variants are that output with a node's state or name changed), and `sinfo` answers each
call with the next of the states the test gives it, so that "a job starts during the run"
is the controller's answer changing between the busy refusal and the re-check. Everything
between those commands and the verdicts is the real code: nodetune's Slurm session on this
machine, `check` on this machine (`ansible_connection: local`), validate's judging. What no
node here can measure (an all_reduce between two GPU nodes) is a stand-in, named below.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune import records
from nodetune.ansible.inventory import Host, Inventory
from nodetune.slurm.model import SlurmOptions
from tests.conftest import run_nodetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
LOCAL = {"ansible_connection": "local", "net_sysctl_enabled": False}


def sinfo_doc(busy: set[str], names: tuple[str, ...] = ("nt-slurm-1", "nt-slurm-2"), *,
              job_ended: frozenset[str] | set[str] = frozenset()) -> str:
    """The lab's `sinfo --json` with these nodes, ``busy`` ALLOCATED and the rest IDLE;
    ``job_ended``: their last busy time 60 s later than the capture's (a job has ended)."""
    doc = json.loads((FIXTURES / "sinfo-busy.json").read_text())
    template = doc["nodes"][0]
    nodes = []
    for name in names:
        node = copy.deepcopy(template)
        node.update(name=name, hostname=name, state="allocated" if name in busy else "idle")
        if name in job_ended:
            node["last_busy"] += 60
        nodes.append(node)
    doc["nodes"] = nodes
    return json.dumps(doc)


class FakeSlurm:
    """`sinfo` and `squeue` on PATH: each `sinfo` call prints the next of ``states`` (the
    last one again once they run out; "FAIL": sinfo's error when slurmctld is down);
    `squeue` prints the lab's (job 6 on nt-slurm-2)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "bin").mkdir(parents=True)
        self._script("sinfo", 'n=$(cat "$D/calls" 2>/dev/null || echo 0); n=$((n+1)); '
                              'echo "$n" > "$D/calls"; '
                              '[ -f "$D/sinfo-$n.json" ] || n=$(cat "$D/last"); '
                              'if grep -qx FAIL "$D/sinfo-$n.json"; then '
                              'echo "slurm_load_partitions: Unable to contact slurm '
                              'controller (connect failure)" >&2; exit 1; fi; '
                              'cat "$D/sinfo-$n.json"')
        self._script("squeue", f'cat "{FIXTURES / "squeue-busy.json"}"')
        # scontrol is not run here: every Slurm action below is a dry run or a skip.
        self._script("scontrol", 'echo "scontrol ran: $*" >> "$D/scontrol.log"; exit 1')

    def _script(self, name: str, body: str) -> None:
        path = self.root / "bin" / name
        path.write_text(f'#!/bin/sh\nD="{self.root}"\n{body}\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def states(self, *docs: str) -> None:
        for old in (*self.root.glob("sinfo-*.json"), self.root / "calls"):
            old.unlink(missing_ok=True)
        for i, doc in enumerate(docs, start=1):
            (self.root / f"sinfo-{i}.json").write_text(doc)
        (self.root / "last").write_text(str(len(docs)))

    @property
    def calls(self) -> int:
        path = self.root / "calls"
        return int(path.read_text()) if path.exists() else 0

    @property
    def path(self) -> str:
        return f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture()
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", fake.path)
    return fake


def inventory(tmp_path: Path, **hosts: dict[str, Any]) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


# --- check over SSH: the busy refusal -----------------------------------------------


def test_check_refuses_a_node_slurm_allocated_naming_its_job(
        tmp_path: Path, runs_dir: Path, slurm: FakeSlurm) -> None:
    slurm.states(sinfo_doc({"nt-slurm-2"}))
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-2"},
                    there={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-1"})
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir,
                       env={"PATH": slurm.path})
    assert res.code == 2, res.stdout + res.stderr
    doc = res.json()
    assert doc["error"]["host"] == "here"
    assert "here (ALLOCATED: job 6)" in doc["error"]["message"]
    assert "--allow-busy" in doc["error"]["message"]
    assert "checks" not in doc  # refused before anything ran on any node
    (report,) = runs_dir.glob("*-check/report.json")
    assert json.loads(report.read_text()) == doc


def test_check_allow_busy_checks_the_allocated_node_and_asks_slurm_nothing_after(
        tmp_path: Path, runs_dir: Path, slurm: FakeSlurm) -> None:
    slurm.states(sinfo_doc({"nt-slurm-2"}))
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-2"})
    res = run_nodetune("check", str(inv), "--json", "--allow-busy", runs_dir=runs_dir,
                       env={"PATH": slurm.path})
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert doc["nodes"]["here"]["verdict"] == "good" and "slurm_recheck" not in doc
    assert slurm.calls == 0  # the operator accepted the job: Slurm is not asked


def test_check_help_states_the_busy_rule() -> None:
    res = run_nodetune("check", "--help", runs_dir=Path("/nonexistent"))
    text = " ".join(res.stdout.split())
    assert "--allow-busy" in text and "allocated to job N during the run" in text


# --- a job that starts during the run -----------------------------------------------


def test_check_a_job_starting_during_the_run_leaves_its_node_without_verdict(
        tmp_path: Path, runs_dir: Path, slurm: FakeSlurm) -> None:
    """Idle when the run begins (the refusal's sinfo), allocated to job 6 when Slurm is
    asked again: the node that passed every check is unresolved and not acted on, even
    under --drain-unreachable; the node that stayed idle keeps its verdict."""
    slurm.states(sinfo_doc(set()), sinfo_doc({"nt-slurm-2"}))
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-2"},
                    there={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-1"})
    res = run_nodetune("check", str(inv), "--json", "--drain", "--drain-unreachable",
                       "--resume", "--dry-run", runs_dir=runs_dir, env={"PATH": slurm.path})
    assert res.code == 1, res.stdout + res.stderr
    doc = res.json()
    assert doc["status"] == "unresolved"
    here = doc["nodes"]["here"]
    assert here["verdict"] == "unresolved"
    assert "here: allocated to job 6 during the run" in here["reason"]
    assert doc["nodes"]["there"]["verdict"] == "good"
    assert doc["slurm_recheck"]["allocated_during_run"] == {"here": ["6"]}
    actions = {a["node"]: a for a in doc["slurm"]["actions"]}
    assert actions["here"]["action"] == "skip" and actions["here"]["command"] == []
    assert "allocated to job 6 during the run" in actions["here"]["reason"]
    assert not (slurm.root / "scontrol.log").exists()
    assert "here was allocated to job 6 during the run" in " ".join(res.stderr.split())


def test_check_a_job_that_ran_and_ended_during_the_run_leaves_its_node_without_verdict(
        tmp_path: Path, runs_dir: Path, slurm: FakeSlurm) -> None:
    """Idle at both questions, but Slurm's last busy time of one node moved between them: a
    job started and ended there while it was measured. That node is unresolved and not
    acted on; the other keeps its verdict. Its time unchanged, the verdict stands."""
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-2"},
                    there={**LOCAL, "nodetune_slurm_nodename": "nt-slurm-1"})
    slurm.states(sinfo_doc(set()), sinfo_doc(set(), job_ended={"nt-slurm-2"}))
    res = run_nodetune("check", str(inv), "--json", "--drain", "--resume", "--dry-run",
                       runs_dir=runs_dir, env={"PATH": slurm.path})
    assert res.code == 1, res.stdout + res.stderr
    doc = res.json()
    assert doc["nodes"]["here"]["verdict"] == "unresolved"
    assert "here: a job ran on it during the run and had ended by its end" in \
        doc["nodes"]["here"]["reason"], doc["nodes"]["here"]
    assert doc["nodes"]["there"]["verdict"] == "good"
    assert list(doc["slurm_recheck"]["busy_and_idle_again_during_run"]) == ["here"]
    assert {a["node"]: a["action"] for a in doc["slurm"]["actions"]}["here"] == "skip"
    slurm.states(sinfo_doc(set()))
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir,
                       env={"PATH": slurm.path})
    assert res.code == 0 and res.json()["nodes"]["here"]["verdict"] == "good", res.stdout


def _pair(tmp_path: Path, *names: str) -> Inventory:
    hosts = tuple(Host(name=n, groups=("gpu_nodes",),
                       vars={"ansible_host": f"192.0.2.{i}", "nodetune_slurm_nodename": s})
                  for i, (n, s) in enumerate((n.split("=") for n in names), start=10))
    return Inventory(source=tmp_path, hosts=hosts, groups=("gpu_nodes",))


def test_validate_pair_a_job_starting_mid_measurement_is_no_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> None:
    """The all_reduce itself is a stand-in (no two GPU nodes here): run_pair answers with
    correct sums; validate judges them as usual (PASS), then Slurm, asked again, has
    given gpu-b to job 6: no pass, neither node drained or resumed, the job named."""
    from nodetune.collective.launch import Measurement
    from nodetune.collective.plan import Launch, Options, Plan, plan_pair, select_pair
    from nodetune.measure.sweep import SizeResult
    from nodetune.validate import run as validate_run
    from nodetune.validate import verb as pair_verb

    def stand_in_run_pair(plan: Plan, *, progress: object) -> Measurement:
        launch = Launch(plan=plan, backend="gloo", nproc_per_node=1, sizes=(1 << 20,),
                        port=29500, env={n.name: dict(n.env) for n in plan.nodes})
        return Measurement(launch=launch, world=2, logs={n.name: () for n in plan.nodes},
                           sizes=(SizeResult(bytes=1 << 20, count=1 << 18, type="float",
                                             time_us=100.0, algbw=10.0, busbw=10.0,
                                             wrong=0),))

    monkeypatch.setattr(validate_run, "run_pair", stand_in_run_pair)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    slurm.states(sinfo_doc(set()), sinfo_doc({"nt-slurm-2"}))
    inv = _pair(tmp_path, "gpu-a=nt-slurm-1", "gpu-b=nt-slurm-2")
    request = pair_verb.Request(
        inventory=inv, plan=plan_pair(select_pair(inv), Options(backend="gloo")),
        slurm=SlurmOptions(drain=True, drain_unreachable=True, resume=True, dry_run=True))
    out = pair_verb.run(request, record=records.new_run("validate"))
    assert out.result.verdict.value == "pass"  # what was measured, kept in the record
    assert int(out.code) == 1 and out.doc["status"] == "unresolved"
    for node in ("gpu-a", "gpu-b"):
        assert out.doc["nodes"][node]["verdict"] == "unresolved"
        assert "gpu-b: allocated to job 6 during the run" in out.doc["nodes"][node]["reason"]
    assert out.doc["slurm_recheck"]["allocated_during_run"] == {"gpu-b": ["6"]}
    assert {a["node"]: a["action"] for a in out.doc["slurm"]["actions"]} == \
        {"gpu-a": "skip", "gpu-b": "skip"}
    # Idle throughout: the pass stands.
    slurm.states(sinfo_doc(set()))
    again = pair_verb.run(request, record=records.new_run("validate"))
    assert int(again.code) == 0 and again.doc["status"] == "pass"
    assert again.doc["slurm_recheck"]["allocated_during_run"] == {}
    # Slurm cannot be asked after the run: whether a job arrived is unknown, no pass.
    slurm.states(sinfo_doc(set()), "FAIL")
    unknown = pair_verb.run(request, record=records.new_run("validate"))
    assert int(unknown.code) != 0 and unknown.doc["status"] == "unresolved"
    assert "Unable to contact slurm controller" in unknown.doc["slurm_recheck"]["error"]
    for node in ("gpu-a", "gpu-b"):
        assert unknown.doc["nodes"][node]["verdict"] == "unresolved"
        assert "could not be asked after the run" in unknown.doc["nodes"][node]["reason"]


def test_fleet_a_job_starting_mid_run_unresolves_its_node_and_partners_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> None:
    """Every pair passes (the pair test is a stand-in, as in test_validate_rdma); job 6
    starts on f2 during the rounds: f2 and every node it was measured with are
    unresolved and left alone by Slurm, the other nodes keep their good verdicts."""
    from nodetune.collective.plan import Options
    from nodetune.fleet import run as fleet_run
    from nodetune.fleet import verb as fleet_verb
    from nodetune.fleet.planner import Outcome, PairOutcome
    from nodetune.verdicts import NodeState, NodeVerdict

    monkeypatch.setattr(fleet_run, "preflight", lambda hosts, *_a, **_k: {
        h.name: NodeVerdict(h.name, NodeState.GOOD, "preflight: ok") for h in hosts})
    # the pair's outcome alone: no measurement (None) is recorded beside it
    monkeypatch.setattr(fleet_run, "run_one_pair", lambda pair, *_a, **_k: (
        PairOutcome(pair.hosts, pair.round, Outcome.PASS, "", 10.0), None))
    monkeypatch.setattr("nodetune.fleet.record.judged", lambda base, res, *_a, **_k: (
        {**base, "nodes": {n: v.to_dict() for n, v in res.verdicts.items()}}, {}))
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    names = tuple(f"nt-slurm-{i}" for i in range(1, 5))
    slurm.states(sinfo_doc(set(), names), sinfo_doc({"nt-slurm-2"}, names))
    inv = _pair(tmp_path, *(f"f{i}=nt-slurm-{i}" for i in range(1, 5)))
    options = fleet_run.FleetOptions(seed=1, skip_checks=True)
    out = fleet_verb.run(fleet_verb.Request(
        inventory=inv, options=Options(),
        fleet=options, slurm=SlurmOptions(drain=True, drain_unreachable=True, dry_run=True)),
        record=records.new_run("validate"))
    assert out.result is not None
    measured_with_f2 = {h for o in out.result.outcomes if "f2" in o.hosts for h in o.hosts}
    assert measured_with_f2 > {"f2"} and measured_with_f2 != {"f1", "f2", "f3", "f4"}
    for node, v in out.result.verdicts.items():
        if node in measured_with_f2:
            assert v.state is NodeState.UNRESOLVED, v
            assert "f2: allocated to job 6 during the run" in v.reason
        else:
            assert v.state is NodeState.GOOD, v
    assert out.code == 1 and out.doc["slurm_recheck"]["allocated_during_run"] == {"f2": ["6"]}
    skipped = {a["node"] for a in out.doc["slurm"]["actions"] if a["action"] == "skip"}
    assert skipped == measured_with_f2


def test_tune_a_job_starting_during_the_runs_recommends_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> None:
    """tune's runs are a stand-in (no two GPU nodes here): the second setting measures
    twice the default's busbw, which tune recommends when both nodes stayed idle; when
    Slurm, asked again after the runs, has given gpu-b to job 6, nothing is recommended
    or written, the job is named and the run exits 1."""
    from nodetune.collective.launch import Measurement
    from nodetune.collective.plan import Launch, Options, Plan
    from nodetune.measure.sweep import SizeResult
    from nodetune.tune import verb as tune_verb
    from nodetune.tune.grid import grid_from

    def stand_in_run_pair(plan: Plan, *, progress: object) -> Measurement:
        env = {n.name: dict(n.env) for n in plan.nodes}
        fast = any(e.get("NCCL_PROTO") == "Simple" for e in env.values())
        busbw = 20.0 if fast else 10.0
        launch = Launch(plan=plan, backend="nccl", nproc_per_node=1, sizes=(1 << 20,),
                        port=29500, env=env)
        return Measurement(launch=launch, world=2, logs={n.name: () for n in plan.nodes},
                           sizes=(SizeResult(bytes=1 << 20, count=1 << 18, type="float",
                                             time_us=100.0, algbw=busbw, busbw=busbw,
                                             wrong=0),))

    monkeypatch.setattr(tune_verb, "run_pair", stand_in_run_pair)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    inv = _pair(tmp_path, "gpu-a=nt-slurm-1", "gpu-b=nt-slurm-2")
    write = tmp_path / "nccl.yml"

    def tune() -> Any:
        write.unlink(missing_ok=True)
        return tune_verb.run(tune_verb.Request(
            inventory=inv, pair="gpu-a,gpu-b", options=Options(backend="nccl"),
            grid=grid_from({"NCCL_PROTO": ("Simple",)}), repeats=3, min_gain=1.0,
            write=write), record=records.new_run("tune"))

    slurm.states(sinfo_doc(set()))
    idle = tune()
    assert idle.recommendation.combo is not None and write.exists()
    assert idle.doc["exit_code"] == 0 and idle.doc["slurm_recheck"]["allocated_during_run"] == {}
    slurm.states(sinfo_doc(set()), sinfo_doc({"nt-slurm-2"}))
    busy = tune()
    assert busy.recommendation.combo is None and not write.exists() and busy.snippet is None
    assert "gpu-b: allocated to job 6 during the run" in busy.recommendation.reason
    assert busy.doc["exit_code"] == 1 and busy.doc["status"] == "unresolved"
