"""check's expectations (role defaults under inventory vars), verdicts and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodetune.ansible.inventory import Host
from nodetune.ansible.role_defaults import role_defaults
from nodetune.check import CheckOptions, check_nodes, exit_code, node_verdicts
from nodetune.check.expect import expectations
from nodetune.check.model import NodeChecks, Status, failed, passed, skipped, warned
from nodetune.errors import ExitCode, InputError
from nodetune.verdicts import NodeState

ROOT = Path(__file__).resolve().parents[2]


def test_expectations_are_the_role_defaults_under_the_inventory() -> None:
    defaults = yaml.safe_load((ROOT / "roles/net_sysctl/defaults/main.yml").read_text())
    exp = expectations(Host("n", (), {
        "net_sysctl_settings_overrides": {"net.core.rmem_max": 268435456},
        "net_sysctl_tcp_congestion_control": "cubic"}))
    assert exp.sysctls["net.core.rmem_max"] == "268435456"
    assert exp.sysctl_source["net.core.rmem_max"] == "net_sysctl_settings_overrides (inventory)"
    assert exp.sysctls["net.ipv4.tcp_wmem"] == defaults["net_sysctl_settings"]["net.ipv4.tcp_wmem"]
    assert exp.sysctl_source["net.ipv4.tcp_wmem"] == "net_sysctl_settings (role default)"
    assert exp.sysctls["net.ipv4.tcp_congestion_control"] == "cubic"
    assert exp.roce_pfc == tuple(role_defaults("roce_qos")["roce_qos_pfc_priorities"])
    assert exp.driver_version is not None and not exp.driver_version.from_inventory


def test_jinja_in_inventory_values_is_evaluated() -> None:
    exp = expectations(Host("n", (), {"fabric_mtu": 9000,
                                      "net_mtu_interfaces": [{"name": "eth1",
                                                              "mtu": "{{ fabric_mtu }}"}]}))
    assert exp.mtu_requests[0]["mtu"] == 9000


@pytest.mark.parametrize(("vars_", "words"), [
    ({"nodetune_expected_gpus": "eight"}, "nodetune_expected_gpus 'eight' is not a whole number"),
    ({"nodetune_min_shm": "lots"}, "nodetune_min_shm 'lots'"),
    ({"net_sysctl_settings_overrides": {"net..bad": 1}}, "invalid sysctl key 'net..bad'"),
    ({"net_sysctl_settings_overrides": ["x"]}, "must be a mapping"),
    ({"net_mtu_interfaces": [{"name": "eth1"}]}, "net_mtu_interfaces must be a list"),
    ({"roce_qos_pfc_priorities": [9]}, "priorities are 0-7"),
    ({"net_sysctl_enabled": "maybe"}, "net_sysctl_enabled 'maybe' is not a boolean"),
])
def test_bad_input_names_the_host_and_variable(vars_: dict[str, object], words: str) -> None:
    with pytest.raises(InputError) as err:
        expectations(Host("gpu-7", (), vars_))
    assert words in str(err.value) and err.value.host == "gpu-7"


def test_bad_input_anywhere_contacts_no_node() -> None:
    # node-a would be unreachable (exit 3); the bad variable on node-b stops the run first.
    hosts = [Host("node-a", (), {"ansible_host": "192.0.2.1"}),
             Host("node-b", (), {"nodetune_expected_gpus": -1})]
    with pytest.raises(InputError, match="must be >= 0"):
        check_nodes(hosts, CheckOptions(timeout=1))


def test_an_unreachable_node_is_reported_not_raised(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = Host("gone", (), {"ansible_host": "127.0.0.1", "ansible_port": 1,
                             "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"})
    results = check_nodes([host], CheckOptions(timeout=5))
    assert not results["gone"].reachable
    assert "cannot reach" in (results["gone"].error or "")
    assert exit_code(results) is ExitCode.INFRASTRUCTURE
    verdict = node_verdicts(results)["gone"]
    assert verdict.state is NodeState.UNREACHABLE and "cannot reach" in verdict.reason


def test_verdicts_and_exit_codes() -> None:
    ok = NodeChecks("a", (passed("gpu.count", "8", "8", "nodetune_expected_gpus"),
                          warned("gpu.clocks", "x", "y", "z", "sw thermal"),
                          skipped("gpu.nvlink", "no NVLink")))
    bad = NodeChecks("b", (passed("gpu.count", "8", "8", "v"),
                           failed("fabric.mtu[eth1]", "1500", "9000", "net_mtu_interfaces",
                                  "eth1 MTU is 1500")))
    verdicts = node_verdicts({"a": ok, "b": bad})
    assert verdicts["a"].state is NodeState.GOOD
    assert "warnings: gpu.clocks" in verdicts["a"].reason
    assert verdicts["b"].state is NodeState.BAD
    assert verdicts["b"].reason == ("1 check(s) failed: fabric.mtu[eth1] (1500, expected 9000)")
    assert verdicts["b"].to_dict()["verdict"] == "bad"
    assert exit_code({"a": ok}) is ExitCode.OK
    assert exit_code({"a": ok, "b": bad}) is ExitCode.CHECK_FAILED
    timed_out = NodeChecks("c", error="no answer", error_exit_code=4)
    assert exit_code({"b": bad, "c": timed_out}) is ExitCode.TIMEOUT
    assert [r["status"] for r in bad.to_list()] == ["fail", "pass"]
    assert bad.to_list()[0] == {"name": "fabric.mtu[eth1]", "status": "fail",
                                "measured": "1500", "expected": "9000",
                                "source": "net_mtu_interfaces", "message": "eth1 MTU is 1500",
                                "action": "re-run"}
    assert Status.FAIL.order < Status.UNKNOWN.order < Status.WARN.order < Status.PASS.order \
        < Status.SKIP.order


def test_checks_reads_go_through_the_executor_and_its_faults_are_the_launchers(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """check over SSH runs the probe and the health reader on the node through its executor
    (one per node, closed after), with check's timeouts; what the launcher raises or
    answers is worded and blamed as the session's own answer was."""
    from nodetune.check import health, probe, run
    from nodetune.errors import NodeTimeout
    from nodetune.remote.executor import Command, Ran
    from tests.fake_executor import FakeExecutor

    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path))
    host = Host("gpu-1", (), {"nodetune_python": "/opt/venv/bin/python"})
    made: list[FakeExecutor] = []

    def connect(answer: FakeExecutor) -> None:
        def connected(h: Host, **_kw: object) -> FakeExecutor:
            assert h.name == "gpu-1"
            made.append(answer)
            return answer
        monkeypatch.setattr(run.ssh_executor, "connect", connected)

    def no_python(_node: str, _command: Command, _timeout: float) -> Ran:
        return Ran(127, "", "sh: python3: not found")

    connect(FakeExecutor(no_python))
    results = check_nodes([host], CheckOptions(timeout=120, dcgm_level=0, allreduce=False))
    ex = made[-1]
    programs = {argv[3] for argv in ex.argvs("gpu-1")}
    assert programs == {probe.source(), health.source()}
    assert all(argv[:3] == ["python3", "-S", "-c"] for argv in ex.argvs("gpu-1"))
    assert {t for _n, _c, t in ex.ran} == {120} and ex.closed
    assert results["gpu-1"].error == ("'python3' not found on the node; set "
                                      "ansible_python_interpreter to its Python 3")
    assert exit_code(results) is ExitCode.INFRASTRUCTURE

    def hangs(_node: str, command: Command, timeout: float) -> Ran:
        raise NodeTimeout(f"`{command.argv[0]}` did not finish within {timeout:.0f} s",
                          host="gpu-1")

    connect(FakeExecutor(hangs))
    results = check_nodes([host], CheckOptions(timeout=120, dcgm_level=0, allreduce=False))
    assert results["gpu-1"].error == "`python3` did not finish within 120 s"
    assert results["gpu-1"].error_blames_node and made[-1].closed
    assert exit_code(results) is ExitCode.TIMEOUT
