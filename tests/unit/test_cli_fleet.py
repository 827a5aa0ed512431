"""`nodetune validate` on more than two hosts, without connecting: --plan and bad input."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodetune.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    return CliRunner()


def fleet_inventory(tmp_path: Path, n: int = 5, *, racks: bool = True) -> Path:
    # 192.0.2.0/24 is TEST-NET-1: nothing answers there, so any connection would fail.
    lines = ["all:", "  children:", "    gpu_nodes:", "      hosts:"]
    for i in range(n):
        lines.append(f"        gpu-{i:02d}:")
        lines.append(f"          ansible_host: 192.0.2.{i + 10}")
        if racks and i != n - 1:
            lines.append(f"          rack: r{i % 2}")
        elif racks:
            lines.append("          rack: r1")
    inv = tmp_path / "hosts.yml"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def test_plan_prints_round_one_and_contacts_no_one(runner: CliRunner,
                                                      tmp_path: Path) -> None:
    inv = fleet_inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), "--plan", "--seed", "7"])
    assert res.exit_code == 0, res.output
    assert "round 1: 2 pair(s) of 5 node(s) under test; seed 7" in res.output
    assert "plan only: nothing was contacted" in res.output
    assert "not in round 1" in res.output
    again = runner.invoke(main, ["validate", str(inv), "--plan", "--seed", "7", "--json"])
    doc = json.loads(again.output)
    assert doc["status"] == "plan" and doc["exit_code"] == 0
    pairs = [p["hosts"] for p in doc["fleet"]["round_one"]]
    assert len(pairs) == 2 and all(" ".join(p) in " ".join(res.output.split()) for p in pairs)
    assert len(list((tmp_path / "runs").iterdir())) == 2  # a run record every time


def test_plan_with_partners_shows_who_tests_whom(runner: CliRunner, tmp_path: Path) -> None:
    inv = fleet_inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), "--limit", "gpu-03,gpu-04",
                               "--partners", "gpu-00,gpu-01,gpu-02", "--plan", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)["fleet"]
    assert sorted(p["hosts"][0] for p in doc["round_one"]) == ["gpu-03", "gpu-04"]
    assert all(p["hosts"][1] in doc["partners"] for p in doc["round_one"])


def test_pairing_cross_by_rack(runner: CliRunner, tmp_path: Path) -> None:
    inv = fleet_inventory(tmp_path, 6)
    res = runner.invoke(main, ["validate", str(inv), "--pairing", "cross", "--pairing-key",
                               "rack", "--plan", "--json"])
    assert res.exit_code == 0, res.output
    rack = {f"gpu-{i:02d}": f"r{i % 2}" for i in range(5)} | {"gpu-05": "r1"}
    pairs = [p["hosts"] for p in json.loads(res.output)["fleet"]["round_one"]]
    assert len(pairs) == 3 and all(rack[a] != rack[b] for a, b in pairs)


@pytest.mark.parametrize(("args", "message"), [
    (["--pairing", "same"], "needs --pairing-key"),
    (["--pairing-key", "rack"], "--pairing-key needs --pairing same"),
    (["--pairing", "same", "--pairing-key", "row"], "gpu-00: --pairing-key row"),
    (["--partners", "nope*"], "--partners"),
    (["--limit", "gpu-00", "--partners", "gpu-00"], "every selected host is a --partners"),
])
def test_bad_fleet_input_exits_2_naming_the_problem(runner: CliRunner, tmp_path: Path,
                                                    args: list[str], message: str) -> None:
    inv = fleet_inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), *args, "--plan"])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_help_states_the_fleet_guarantee() -> None:
    """--help is what a person scans; the guarantee is in the reference it points at."""
    res = CliRunner().invoke(main, ["validate", "--help"])
    text = " ".join(res.output.split())
    assert "docs/validate.md" in text and len(res.output.splitlines()) < 165
    reference = " ".join((REPO / "docs" / "validate.md").read_text().split())
    assert "exact when at most a quarter of the nodes are bad: N/2 + 2k pair tests in 2 rounds" \
        in reference
    for option in ("--partners", "--parallel", "--pairing", "--pairing-key", "--seed",
                   "--plan", "--dry-run", "--skip-checks"):
        assert option in text


def test_dry_run_means_the_scontrol_commands_as_in_check(runner: CliRunner,
                                                         tmp_path: Path) -> None:
    """--dry-run qualifies --drain/--resume on validate as on check; the plan is --plan."""
    inv = fleet_inventory(tmp_path)
    for verb in ("validate", "check"):
        res = runner.invoke(main, [verb, str(inv), "--dry-run"])
        assert res.exit_code == 2, res.output
        assert "--dry-run shows the scontrol commands of --drain/--resume" in res.output
        assert "validate --plan" in res.output
    text = " ".join((REPO / "docs" / "validate.md").read_text().split())
    assert "--plan prints round 1's pairs and contacts nothing, Slurm included" in text
    assert "prints the scontrol commands it would run, changing nothing in Slurm" in text


def test_every_fleet_pair_row_and_record_shows_transport_and_interface() -> None:
    from nodetune.cli import fleet_view
    from nodetune.collective.datapath import DataPath
    from nodetune.fleet import record as fleet_record
    from nodetune.fleet.planner import Outcome, PairOutcome
    from nodetune.measure.sweep import SizeResult
    from nodetune.validate.result import PairResult, Transport, Verdict

    paths = (DataPath("a", "eth0", "route to the master", "eth0"),
             DataPath("b", "eth0", "route to the master", "eth0"))
    result = PairResult(
        hosts=("a", "b"), backend="gloo", nproc_per_node=1, world=2,
        sizes=(SizeResult(1 << 24, 1 << 22, "float", 1.0, 0.3, 0.3, 0),),
        transport=Transport.gloo(("eth0",)), verdict=Verdict.PASS, reasons=(),
        paths=paths, warnings=("the data path is the interface SSH uses on a (eth0)",))
    outcome = PairOutcome(("a", "b"), 1, Outcome.PASS, "", 0.3)
    doc = fleet_record.pair_doc(outcome, result)
    assert (doc["path"], doc["transport"], doc["interfaces"]) == ("gloo/TCP eth0", "gloo/TCP",
                                                                  ["eth0"])
    assert [p["over_ssh"] for p in doc["paths"]] == [True, True]
    assert doc["warnings"] == list(result.warnings)
    assert json.loads(json.dumps(doc)) == doc
    assert "gloo/TCP eth0" in fleet_view._pair_row(outcome, result)
    assert "nccl_effective" not in doc  # gloo: NCCL read nothing
    unmeasured = fleet_record.pair_doc(PairOutcome(("a", "b"), 1, Outcome.ERROR, "x"), None)
    assert (unmeasured["path"], unmeasured["paths"]) == (None, [])
    effective = {"a": {"version": "2.28.9+cuda13.0", "check": {"status": "pass"}}}
    nccl = fleet_record.pair_doc(outcome, dataclasses.replace(result, backend="nccl",
                                                              nccl_effective=effective))
    assert nccl["nccl_effective"] == effective


def test_a_malformed_data_interface_stops_the_fleet_before_any_node(
        runner: CliRunner, tmp_path: Path) -> None:
    inv = fleet_inventory(tmp_path, 4)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu-02.yml").write_text(
        'nccl_config_socket_ifname: "=ens1f0np0,$(reboot)"\n')
    res = runner.invoke(main, ["validate", str(inv), "--plan"])
    assert res.exit_code == 2, res.output
    assert "gpu-02" in res.output and "nccl_config_socket_ifname" in res.output


def test_all_with_rdma_bw_is_bad_input_before_any_node(runner: CliRunner,
                                                       tmp_path: Path) -> None:
    """ib_write_bw runs between pairs: a job-wide group (--all) has none (exit 2)."""
    inv = fleet_inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), "--all", "--rdma-bw", "--json"])
    assert res.exit_code == 2, res.output
    assert "--rdma-bw" in res.output


@pytest.mark.parametrize("extra", [["--parallel", "2"], ["--pairing", "cross"],
                                   ["--pairing-key", "rack"], ["--seed", "7"],
                                   ["--skip-checks"], ["--partners", "gpu-01"], ["--plan"]])
def test_all_refuses_each_fleet_only_option_naming_it(runner: CliRunner, tmp_path: Path,
                                                      extra: list[str]) -> None:
    """--all is one group: an option only a fleet of pairs reads is refused, not ignored."""
    inv = fleet_inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), "--all", *extra, "--json"])
    assert res.exit_code == 2, res.output
    assert extra[0] in res.output
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2 and extra[0] in doc["error"]["message"]



def test_a_fleet_pair_in_an_image_carries_its_container_section_pass_or_fail(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the pair path's record: the checklist of each node, from a pair that ran in the
    image and from one whose container failed it before anything was measured."""
    from nodetune.ansible.inventory import Host
    from nodetune.collective.plan import Options
    from nodetune.container import probe as cp
    from nodetune.container import runtime as ct
    from nodetune.errors import ImageCheckFailed
    from nodetune.fleet import record as fleet_record
    from nodetune.fleet import run as fleet_run
    from nodetune.fleet.planner import Outcome, PlannedPair
    from nodetune.measure.sweep import SizeResult
    from nodetune.validate.result import PairResult, Transport, Verdict

    node = {"gpu": False, "shm": 2**30, "rdma": [], "ibverbs": False, "torch": "2.3.0"}
    hosts = {n: Host(n, ("gpu_nodes",), {"ansible_host": "192.0.2.1"}) for n in ("a", "b")}

    def probed(name: str, shm: int) -> dict[str, object]:
        inside = {**node, "shm": shm}
        return cp.Probed(host=name, container=ct.config(hosts[name], "localhost/train:1"),
                         digest="sha256:ab", node=node, inside=inside,
                         results=cp.judge(node, inside)).to_dict()
    good = {n: probed(n, 2**30) for n in hosts}
    result = PairResult(hosts=("a", "b"), backend="gloo", nproc_per_node=1, world=2,
                        sizes=(SizeResult(1 << 24, 1 << 22, "float", 1.0, 0.3, 0.3, 0),),
                        transport=Transport.gloo(("eth0",)), verdict=Verdict.PASS, reasons=())
    ran = type("Validation", (), {"result": result, "measurement": type(
        "M", (), {"containers": good, "logs": {}})()})()
    monkeypatch.setattr(fleet_run, "validate_planned", lambda *_a, **_k: ran)
    pair = PlannedPair(("a", "b"), 1, "round one")
    options = Options(image="localhost/train:1")
    outcome, _ = fleet_run.run_one_pair(pair, hosts, options, threading.Event(),
                                        lambda _n, _m: None)
    doc = fleet_record.pair_doc(outcome, result)
    assert outcome.outcome is Outcome.PASS and doc["container"] == good
    assert doc["container"]["a"]["digest"] == "sha256:ab"

    small = {n: probed(n, 64 * 2**20) for n in hosts}

    def refused(*_a: object, **_k: object) -> None:
        exc = ImageCheckFailed("/dev/shm inside the container is 64.0 MiB", host="a")
        exc.sections = {"container": small}
        raise exc
    monkeypatch.setattr(fleet_run, "validate_planned", refused)
    outcome, validation = fleet_run.run_one_pair(pair, hosts, options, threading.Event(),
                                                 lambda _n, _m: None)
    doc = fleet_record.pair_doc(outcome, validation)
    assert outcome.outcome is Outcome.ERROR and validation is None
    assert {r["name"]: r["status"] for r in doc["container"]["b"]["checks"]}[
        "container.shm"] == "fail"
    assert json.loads(json.dumps(doc)) == doc
    bare = fleet_record.pair_doc(fleet_run.PairOutcome(("a", "b"), 1, Outcome.PASS), result)
    assert "container" not in bare  # no --image: no section


@pytest.mark.parametrize("variable, value", [
    ("nodetune_socket_ifname", "'eth0 eth1'"),
    ("nodetune_validate_master_addr", "'10.0.0.1; reboot'"),
    ("nodetune_validate_expect_transport", "carrier-pigeon"),
    ("nodetune_validate_profile", "no-such-profile"),
    ("nodetune_validate_min_busbw_gbps", "fast"),
    ("nodetune_env", "'NCCL_DEBUG=INFO'"),
])
def test_a_bad_input_on_any_host_stops_the_fleet_before_any_node(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        variable: str, value: str) -> None:
    """Every host can be node rank 0 of some pair: each one's per-host inputs (those the
    pair's plan reads from rank 0 too) are checked before the first node is contacted,
    not when the pair holding a late host is planned, after the health checks."""
    from nodetune.remote import ssh

    contacted: list[str] = []

    def no_node(host: object, **_kw: object) -> None:
        contacted.append(str(getattr(host, "name", host)))
        raise AssertionError("a node was contacted")

    monkeypatch.setattr(ssh, "connect", no_node)
    inv = fleet_inventory(tmp_path, 6)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu-04.yml").write_text(f"{variable}: {value}\n")
    res = runner.invoke(main, ["validate", str(inv), "--seed", "7", "--skip-checks", "--json"])
    assert res.exit_code == 2, res.output
    assert contacted == []
    doc = json.loads(res.stdout)
    assert doc["error"]["host"] == "gpu-04"
    # the variable, or the value it holds (an unknown profile lists the known ones)
    assert variable in doc["error"]["message"] or value.strip("'") in doc["error"]["message"]


def test_hosts_that_are_never_paired_may_expect_different_transports(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rack r0 expects ib, rack r1 socket: with --pairing same by rack no pair holds both,
    so the fleet is planned; paired at random, two hosts that may meet are named (exit 2)
    before any node is contacted."""
    from nodetune.remote import ssh

    def no_node(host: object, **_kw: object) -> None:
        raise AssertionError("a node was contacted")

    monkeypatch.setattr(ssh, "connect", no_node)
    inv = fleet_inventory(tmp_path, 6)
    (tmp_path / "host_vars").mkdir()
    for i in range(6):
        (tmp_path / "host_vars" / f"gpu-{i:02d}.yml").write_text(
            f"nodetune_validate_expect_transport: {'ib' if i % 2 == 0 else 'socket'}\n")
    res = runner.invoke(main, ["validate", str(inv), "--seed", "7", "--plan", "--pairing",
                               "same", "--pairing-key", "rack", "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["validate", str(inv), "--seed", "7", "--skip-checks", "--json"])
    assert res.exit_code == 2, res.output
    message = json.loads(res.stdout)["error"]["message"]
    assert "expects ib" in message and "expects socket" in message, message
