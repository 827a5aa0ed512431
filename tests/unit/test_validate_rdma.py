"""validate --rdma-bw (nodetune.validate.rdma): the node probe over a real local shell and a
sysfs tree of the real layout, skips, verdicts, the report sections, and a stopped run
leaving nothing behind. ib_write_bw is the named stand-in
(tests/fixtures/check/health/ib_write_bw-standin: perftest's command line and report,
real bytes over TCP; there is no RDMA NIC here)."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodetune.ansible.inventory import Host
from nodetune.check import node_run
from nodetune.check.model import CheckResult, Status, failed, passed, skipped
from nodetune.measure import rdma_peer
from nodetune.remote import ssh
from nodetune.remote.ssh_executor import over_session
from nodetune.reports import junit, prom
from nodetune.validate import rdma
from nodetune.verdicts import NodeState, NodeVerdict
from tests.conftest import free_port

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "health" / \
    "ib_write_bw-standin"


def sysfs(root: Path, device: str, state: str, rate: str, port: str = "1") -> None:
    """One port of /sys/class/infiniband's layout (sysfs-class-infiniband)."""
    d = root / device / "ports" / port
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "rate").write_text(rate + "\n")


def host(name: str, root: Path) -> Host:
    return Host(name, ("gpu_nodes",), {"ansible_connection": "local",
                                       "ansible_host": "127.0.0.1",
                                       "nodetune_rdma_sysfs": str(root)})


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(rdma_peer, "DURATION_S", 1)
    monkeypatch.setattr(rdma_peer, "TCP_PORT", free_port())  # the stand-in's server listens there


def test_probe_reads_ports_tool_and_gpudirect(tmp_path: Path, standin: None) -> None:
    root = tmp_path / "ib"
    sysfs(root, "mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(root, "mlx5_1", "1: DOWN", "10 Gb/sec (4X SDR)")
    h = host("gpu-1", root)
    seen = rdma.probe(over_session(h.name, ssh.connect(h)), h, timeout=30)
    assert seen.tool and not seen.cuda  # no nvidia_peermem here
    assert [p["device"] for p in seen.active] == ["mlx5_0"]
    assert seen.ports[1] == {"device": "mlx5_1", "port": "1", "state": "1: DOWN",
                             "rate": "10 Gb/sec (4X SDR)"}


def test_the_probe_lists_the_ports_node_facts_lists(tmp_path: Path, standin: None) -> None:
    """The probe is sh, not Python (a node need have no interpreter nodetune can name for
    it), so it cannot run node_facts' rdma_ports, the one reading of a node's RDMA ports
    that the roles and check's node programs share; on a tree of the real layout it finds
    the same ports, in the same order, with the same state and rate as that reading."""
    root = tmp_path / "ib"
    for device, port in (("mlx5_1", "1"), ("mlx5_0", "2"), ("mlx5_0", "1"), ("mlx5_2", "1")):
        sysfs(root, device, "4: ACTIVE" if port == "1" else "1: DOWN", "200 Gb/sec (2X NDR)",
              port)
    (root / "mlx5_3" / "ports").mkdir(parents=True)  # a device without ports
    (root / "mlx5_2" / "ports" / "1" / "rate").unlink()  # no rate: "" here, None there
    h = host("gpu-1", root)
    seen = rdma.probe(over_session(h.name, ssh.connect(h)), h, timeout=30)
    fact: dict[str, Any] = {}
    node_run.fact_script("", fact)
    listed = [{"device": dev, "port": port, "state": fact["read"](path + "/state"),
               "rate": fact["read"](path + "/rate") or ""}
              for dev, found in fact["rdma_ports"](str(root)) for port, path in found]
    assert [dict(p) for p in seen.ports] == listed and len(listed) == 4


def test_no_port_and_no_tool_are_skips_with_the_reason() -> None:
    def never(_p: Any, _c: bool) -> list[CheckResult]:
        raise AssertionError("measured without a port or a tool")

    down = rdma.parse_probe("tool\nport\tmlx5_0\t1\t1: DOWN\t400 Gb/sec (4X NDR)\n")
    (r,) = rdma.judge_node("gpu-1", down, "gpu-2", down, never)
    assert r.status is Status.SKIP and r.message == (
        "gpu-1: no ACTIVE RDMA port to measure (mlx5_0/1 1: DOWN)")
    up = rdma.parse_probe("tool\nport\tmlx5_0\t1\t4: ACTIVE\t400 Gb/sec (4X NDR)\n")
    no_tool = rdma.parse_probe("port\tmlx5_0\t1\t4: ACTIVE\t400 Gb/sec (4X NDR)\n")
    (r,) = rdma.judge_node("gpu-1", up, "gpu-2", no_tool, never)
    assert r.status is Status.SKIP and "not installed on gpu-2" in r.message
    (r,) = rdma.judge_node("gpu-1", no_tool, "gpu-2", up, never)
    assert r.status is Status.SKIP and "not installed on gpu-1" in r.message
    calls: list[tuple[Any, bool]] = []
    cuda = rdma.parse_probe("tool\ncuda\nport\tmlx5_0\t1\t4: ACTIVE\t400 Gb/sec (4X NDR)\n")
    rdma.judge_node("gpu-1", cuda, "gpu-2", up, lambda p, c: calls.append((p, c)) or [])
    assert calls == [(list(up.active), False)]  # GPU memory only when both have GPUDirect


def test_a_port_is_measured_where_active_on_both_nodes_against_the_slower_end(
        tmp_path: Path, standin: None) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    # mlx5_0: gpu-2's end is the slower one, a mark loopback TCP beats; mlx5_3: 400 Gb/s at
    # both ends, a mark it does not; mlx5_5: ACTIVE on gpu-1 only, so not measured.
    sysfs(a_root, "mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_0", "4: ACTIVE", "0.0001 Gb/sec")
    sysfs(a_root, "mlx5_3", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_3", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(a_root, "mlx5_5", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_5", "1: DOWN", "400 Gb/sec (4X NDR)")
    got = rdma.measure_pair(host("gpu-1", a_root), host("gpu-2", b_root), timeout=60,
                            accept_new_host_keys=False)
    for node, peer in (("gpu-1", "gpu-2"), ("gpu-2", "gpu-1")):
        rows = {r.name: r for r in got[node]}
        assert rows["fabric.rdma_bw[mlx5_0]"].status is Status.PASS, rows
        slow = rows["fabric.rdma_bw[mlx5_3]"]
        assert slow.status is Status.FAIL and f"with {peer}" in slow.measured, slow
        assert slow.expected == ">= 360 Gb/s (0.9 x 400)"
    (skip,) = [r for r in got["gpu-1"] if r.name == "fabric.rdma_bw[mlx5_5]"]
    assert skip.status is Status.SKIP and skip.message == (
        "gpu-2's mlx5_5/1 is 1: DOWN: not measured with gpu-1's")
    assert "fabric.rdma_bw[mlx5_5]" not in {r.name for r in got["gpu-2"]}
    verdicts = rdma.apply_verdicts(
        {n: NodeVerdict(n, NodeState.GOOD, "passed with the other") for n in got}, got,
        pair=True)
    for node in got:  # a pair cannot tell which end is slow: neither node is bad
        v = verdicts[node]
        assert v.state is NodeState.UNRESOLVED, v
        assert v.reason.startswith(f"{node}: fabric.rdma_bw[mlx5_3] ")
        assert v.reason.endswith(f"({rdma.CANNOT_TELL})")


def test_apply_verdicts_keeps_skips_and_states_it_may_not_change() -> None:
    fail = failed("fabric.rdma_bw[mlx5_0]", "10 Gb/s (host memory, 65536 B, with b)",
                  ">= 360 Gb/s (0.9 x 400)", "s", "mlx5_0 to b: 10 Gb/s, below 360")
    skip = skipped("fabric.rdma_bw", "a: no ACTIVE RDMA port to measure")
    before = {"a": NodeVerdict("a", NodeState.BAD, "failed with b"),
              "b": NodeVerdict("b", NodeState.GOOD, "passed"),
              "c": NodeVerdict("c", NodeState.UNREACHABLE, "down"),
              "d": NodeVerdict("d", NodeState.GOOD, "passed")}
    after = rdma.apply_verdicts(before, {"a": [fail], "b": [skip], "c": [fail], "d": [fail]})
    assert after["a"].state is NodeState.BAD
    assert after["a"].reason == ("failed with b; a: fabric.rdma_bw[mlx5_0] 10 Gb/s (host "
                                 "memory, 65536 B, with b), expected >= 360 Gb/s (0.9 x 400)")
    assert after["b"] == before["b"] and after["c"] == before["c"]
    assert after["d"].state is NodeState.UNRESOLVED
    # In a lone pair the partner of a slow result is unresolved with it.
    pair = rdma.apply_verdicts({n: before[n] for n in ("b", "d")}, {"b": [skip], "d": [fail]},
                               pair=True)
    assert pair["b"].state is NodeState.UNRESOLVED
    assert pair["b"].reason.startswith("partner d: fabric.rdma_bw[mlx5_0] 10 Gb/s")


def test_rdma_bw_inputs_are_refused_before_any_node_is_contacted(tmp_path: Path) -> None:
    from nodetune.errors import InputError
    from nodetune.slurm.commands import AllocOptions
    from nodetune.validate.inputs import check_rdma_bw

    good = host("gpu-1", tmp_path)
    check_rdma_bw([good], launcher=None)
    with pytest.raises(InputError, match="--rdma-bw takes no --launcher slurm"):
        check_rdma_bw([good], launcher=AllocOptions())
    bad = Host("gpu-2", ("gpu_nodes",), {"ansible_host": "127.0.0.1",
                                         "nodetune_rdma_sysfs": "relative/path"})
    with pytest.raises(InputError, match="gpu-2"):
        check_rdma_bw([good, bad], launcher=None)


def test_a_stopped_run_ends_both_sides(tmp_path: Path, standin: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the client runs: the server (waiting for it) is ended at once."""
    monkeypatch.setattr(rdma_peer, "PID_DIR", str(tmp_path))
    server = ssh.connect(host("gpu-2", tmp_path))

    class Interrupted:
        """The client's session: Ctrl-C arrives while its ib_write_bw runs."""

        spec = server.spec

        def run(self, argv: list[str], *, timeout: float, **kw: Any) -> Any:
            if "-p" in argv and argv[0] == "sh" and "ib_write_bw" in argv:
                raise KeyboardInterrupt
            return server.run(argv, timeout=timeout, **kw)

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        rdma_peer.measure(over_session("gpu-1", Interrupted()),  # type: ignore[arg-type]
                          over_session("gpu-2", server), device="mlx5_0", port="1",
                          server_addr="127.0.0.1", cuda=False, timeout=60)
    # The stand-in server would wait 11 s for its client: it was ended instead.
    assert time.monotonic() - t0 < 8
    own = f"-p\0{rdma_peer.TCP_PORT}\0".encode()  # this test's port (the fixture's)
    left = [p for p in Path("/proc").glob("[0-9]*")
            if own in _cmdline(p) and b"ib_write_bw" in _cmdline(p)]
    assert left == [] and list(tmp_path.glob("nodetune-ib_write_bw.*")) == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_reports_carry_each_port() -> None:
    ok = passed("fabric.rdma_bw[mlx5_0]", "392.5 Gb/s (host memory, 65536 B, with gpu-2)",
                ">= 360 Gb/s (0.9 x 400)", "s")
    bad = failed("fabric.rdma_bw[mlx5_0]", "120 Gb/s (host memory, 65536 B, with gpu-1)",
                 ">= 360 Gb/s (0.9 x 400)", "s", "mlx5_0 to gpu-1: 120 Gb/s, below 360")
    doc = {"verb": "validate", "started": "2026-11-27T00:00:00+00:00",
           "rdma_bw": rdma.section({"gpu-1": [ok], "gpu-2": [bad]})}
    (family,) = [f for f in text_string_to_metric_families(prom.to_text(doc))
                 if f.name == "nodetune_rdma_bw_gbps"]
    assert sorted((s.labels["node"], s.labels["peer"], s.value) for s in family.samples) == [
        ("gpu-1", "gpu-2", 392.5), ("gpu-2", "gpu-1", 120.0)]
    root = ET.fromstring(junit.to_xml(doc, hostname="h"))
    (suite,) = [s for s in root if s.get("name") == "nodetune validate: rdma_bw"]
    cases = {c.get("classname"): c for c in suite}
    assert cases["nodetune.validate.gpu-1"].find("failure") is None
    failure = cases["nodetune.validate.gpu-2"].find("failure")
    assert failure is not None and "120 Gb/s" in str(failure.get("message")) + str(failure.text)


def test_gpu_memory_run_where_both_sides_have_gpudirect(tmp_path: Path, standin: None) -> None:
    port = {"device": "mlx5_0", "port": "1", "state": "4: ACTIVE", "rate": "0.0001 Gb/sec"}
    node = over_session("gpu-1", ssh.connect(host("gpu-1", tmp_path)))
    host_mem, gpu_mem = rdma_peer.judge_with_peer(node, node, peer="gpu-2",
                                                  peer_addr="127.0.0.1", ports=[port],
                                                  cuda=True, timeout=60)
    assert (host_mem.name, host_mem.status) == ("fabric.rdma_bw[mlx5_0]", Status.PASS)
    assert (gpu_mem.name, gpu_mem.status) == ("fabric.rdma_bw[mlx5_0/cuda]", Status.PASS)
    assert "(GPU memory, 65536 B, with gpu-2)" in gpu_mem.measured


def test_fleet_pair_is_measured_after_its_all_reduce_and_a_slow_port_leaves_it_unresolved(
        tmp_path: Path, standin: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet's wiring, with the all_reduce pair test passed by hand (it needs torch and
    a second node) and ib_write_bw run for real through local sessions."""
    from nodetune.errors import ExitCode
    from nodetune.fleet import record as fleet_record

    a_root, b_root = tmp_path / "a", tmp_path / "b"
    sysfs(a_root, "mlx5_0", "4: ACTIVE", "0.0001 Gb/sec")
    sysfs(b_root, "mlx5_0", "4: ACTIVE", "0.0001 Gb/sec")
    sysfs(a_root, "mlx5_3", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_3", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    res = _fleet_of_two(tmp_path, a_root, b_root, monkeypatch)
    assert res.exit_code is ExitCode.CHECK_FAILED
    for node in ("gpu-1", "gpu-2"):  # never bad: no partner is drained for a shared link
        v = res.verdicts[node]
        assert v.state is NodeState.UNRESOLVED, v
        assert v.reason.startswith(f"{node}: fabric.rdma_bw[mlx5_3]"), v
    doc = fleet_record.result_doc(res)
    for node in ("gpu-1", "gpu-2"):  # failures first
        assert [r["status"] for r in doc["rdma_bw"][node]] == ["fail", "pass"]


def test_a_pair_with_no_active_port_measures_nothing_and_says_so(tmp_path: Path,
                                                                 standin: None) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    sysfs(a_root, "mlx5_0", "1: DOWN", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_0", "1: DOWN", "400 Gb/sec (4X NDR)")
    a, b = host("gpu-1", a_root), host("gpu-2", b_root)
    got = rdma.measure_or_fail(a, b, timeout=60, accept_new_host_keys=False)
    assert all(r.status is Status.SKIP for rows in got.values() for r in rows)
    note = "ib_write_bw: nothing measured: no ACTIVE port on gpu-1, gpu-2"
    assert rdma.unmeasured_note(got) == note
    assert rdma.note_section(got) == {"rdma_bw_note": note}
    good = {n: NodeVerdict(n, NodeState.GOOD, "passed with the other") for n in got}
    assert rdma.apply_verdicts(good, got, pair=True) == good  # no IB demanded: a pass
    # --expect-transport ib (or either node's nodetune_validate_expect_transport: ib):
    # nothing measured fails, naming the nodes; the pair is unresolved (exit 1), never bad.
    b_ib = Host("gpu-2", b.groups, {**b.vars, "nodetune_validate_expect_transport": "ib"})
    for demanded in (rdma.measure_or_fail(a, b, timeout=60, accept_new_host_keys=False,
                                          expect_transport="ib"),
                     rdma.measure_or_fail(a, b_ib, timeout=60, accept_new_host_keys=False)):
        for node in ("gpu-1", "gpu-2"):
            reason = rdma.failed_reason(node, demanded[node])
            assert reason is not None and reason.startswith(
                f"{node}: fabric.rdma_bw nothing measured, expected a measured ACTIVE RDMA "
                "port (--expect-transport ib)"), reason
            assert f"{node}: no ACTIVE RDMA port to measure" in reason
        verdicts = rdma.apply_verdicts(good, demanded, pair=True)
        assert {v.state for v in verdicts.values()} == {NodeState.UNRESOLVED}
        assert rdma.unmeasured_note(demanded) == note  # a failure is not a measurement
    assert rdma.measure_or_fail(a, b_ib, timeout=60, accept_new_host_keys=False,
                                expect_transport="any") == got  # the option wins


def test_with_ib_demanded_only_the_node_without_an_active_port_fails(tmp_path: Path,
                                                                     standin: None) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    sysfs(a_root, "mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_0", "1: DOWN", "400 Gb/sec (4X NDR)")
    got = rdma.measure_or_fail(host("gpu-1", a_root), host("gpu-2", b_root), timeout=60,
                               accept_new_host_keys=False, expect_transport="ib")
    assert rdma.failed_reason("gpu-1", got["gpu-1"]) is None
    assert "gpu-2: no ACTIVE RDMA port" in str(rdma.failed_reason("gpu-2", got["gpu-2"]))
    assert rdma.unmeasured_note(got) == (
        "ib_write_bw: nothing measured: no ACTIVE port on gpu-2; gpu-1: gpu-2's mlx5_0/1 is "
        "1: DOWN: not measured with gpu-1's")
    # A port ACTIVE on both but no ib_write_bw on one: both have no result, both fail.
    no_tool = {n: [skipped(rdma.NAME, "ib_write_bw (perftest) is not installed on gpu-2")]
               for n in ("gpu-1", "gpu-2")}
    demanded = rdma._demand_ib(no_tool)
    assert all(rdma.failed_reason(n, demanded[n]) for n in no_tool)


@pytest.mark.parametrize(("expect", "code"), [(None, "OK"), ("ib", "CHECK_FAILED")])
def test_a_fleet_that_measured_no_bandwidth_says_so_and_fails_where_ib_is_expected(
        tmp_path: Path, standin: None, monkeypatch: pytest.MonkeyPatch, expect: str | None,
        code: str) -> None:
    from nodetune.errors import ExitCode
    from nodetune.fleet import record as fleet_record

    a_root, b_root = tmp_path / "a", tmp_path / "b"
    sysfs(a_root, "mlx5_0", "1: DOWN", "400 Gb/sec (4X NDR)")
    sysfs(b_root, "mlx5_0", "2: INIT", "400 Gb/sec (4X NDR)")
    res = _fleet_of_two(tmp_path, a_root, b_root, monkeypatch, expect_transport=expect)
    assert res.exit_code is ExitCode[code]
    doc = fleet_record.result_doc(res)
    assert doc["rdma_bw_note"] == "ib_write_bw: nothing measured: no ACTIVE port on gpu-1, gpu-2"
    for node in ("gpu-1", "gpu-2"):
        v = res.verdicts[node]
        if expect is None:
            assert v.state is NodeState.GOOD, v
        else:
            assert v.state is NodeState.UNRESOLVED, v
            assert v.reason.startswith(f"{node}: fabric.rdma_bw nothing measured"), v


def test_the_summary_says_when_ib_write_bw_measured_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    from nodetune.cli import rdma_view

    rows = {n: [skipped(rdma.NAME, f"{n}: no ACTIVE RDMA port to measure (mlx5_0/1 1: DOWN)")]
            for n in ("gpu-1", "gpu-2")}
    rdma_view.render(rows)
    out = capsys.readouterr().out
    assert "ib_write_bw: nothing measured: no ACTIVE port on gpu-1, gpu-2" in out
    assert "no ACTIVE RDMA port to measure (mlx5_0/1 1: DOWN)" in out  # the table, too
    rdma_view.render({"gpu-1": [passed("fabric.rdma_bw[mlx5_0]", "390 Gb/s", ">= 360", "s")],
                      "gpu-2": [passed("fabric.rdma_bw[mlx5_0]", "390 Gb/s", ">= 360", "s")]})
    assert "nothing measured" not in capsys.readouterr().out


def _fleet_of_two(tmp_path: Path, a_root: Path, b_root: Path, monkeypatch: pytest.MonkeyPatch,
                  expect_transport: str | None = None) -> Any:
    """A fleet run of gpu-1 and gpu-2 (their sysfs at ``a_root`` and ``b_root``) with
    ib_write_bw, its preflight and pair tests passed by :func:`_pairs_pass`."""
    from nodetune.ansible.inventory import Inventory
    from nodetune.collective.plan import Options
    from nodetune.fleet import run as fleet_run

    inv = Inventory(source=tmp_path, hosts=(host("gpu-1", a_root), host("gpu-2", b_root)),
                    groups=(), limit=None)
    _pairs_pass(monkeypatch)
    options = fleet_run.FleetOptions(seed=1, skip_checks=True)
    return fleet_run.run_fleet(fleet_run.make_plan(inv, options), options,
                               Options(rdma_bw=True, timeout=60,
                                       expect_transport=expect_transport))


def _pairs_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet's health checks and pair tests as stand-ins (no GPU nodes here): every
    node passes its preflight and every pair passes, so that what follows is ib_write_bw's."""
    from nodetune.fleet import run as fleet_run
    from nodetune.fleet.planner import Outcome, PairOutcome

    monkeypatch.setattr(fleet_run, "preflight", lambda hosts, *_a, **_k: {
        h.name: NodeVerdict(h.name, NodeState.GOOD, "preflight: ok") for h in hosts})
    passed_pair = type("Passed", (), {"result": None, "measurement": type(
        "M", (), {"logs": {}})()})()
    monkeypatch.setattr(fleet_run, "run_one_pair", lambda pair, *_a, **_k: (
        PairOutcome(pair.hosts, pair.round, Outcome.PASS, "", 10.0), passed_pair))
