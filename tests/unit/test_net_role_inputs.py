"""Bad inputs to the network roles fail before anything changes, naming the variable.

Each case runs one role on this machine (local connection, check mode). Cases of one
role that differ only in the role's public variables share one ansible-playbook run:
one local inventory host per case, its host vars the case's variables, each case
asserted on its own host's results and recap (the json callback reports each task per
host), where one process per case asserted the same on its own output. The roles check
inputs first, from variables alone; the cases that need a node read point the role's
private sysfs/procfs roots at a temporary directory, so this machine is neither changed
nor read.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import ansible_env

ROOT = Path(__file__).resolve().parents[2]
# The ansible-core of the Python running the tests (the suite runs on two lines).
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def _fake_proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc-sys"
    for key, value in {
        "net.ipv4.tcp_available_congestion_control": "reno cubic",
        "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
        "net.core.rmem_max": "212992",
    }.items():
        file = root.joinpath(*key.split("."))
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(value + "\n")
    return root


def _run(role: str, extra: dict[str, object], tmp_path: Path,
         *args: str, env_: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(f"- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: {role}\n")
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra}))
    env = ansible_env(**(env_ or {}))
    return subprocess.run(
        [
            str(PLAYBOOK),
            "-i",
            "localhost,",
            "-c",
            "local",
            "--check",
            str(play),
            "-e",
            f"@{extra_file}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass(frozen=True)
class HostRun:
    """One inventory host's part of a shared run: one case."""

    failures: int
    unreachable: int
    changed: int
    failed_task: str | None  # the first task that failed on this host
    failed_text: str  # that task's result strings, one a line
    changed_tasks: tuple[str, ...]  # the tasks that reported a change (check mode: would)
    warnings: tuple[str, ...]  # the warnings of this host's results
    text: str  # each task's name, and what the default callback shows of its result
    raw: str  # the whole run's output (for assertion messages)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _shown(result: dict[str, Any]) -> list[str]:
    """The strings of a host's task result that the default callback prints at verbosity 0:
    warnings; a loop's item labels; a failed result, or one a task always shows (a debug, an
    assert that is not quiet), without its invocation."""
    shown = _strings(result.get("warnings", [])) + _strings(result.get("deprecations", []))
    items = result.get("results")
    if isinstance(items, list) and all(isinstance(item, dict) for item in items) and items:
        for item in items:
            shown += [str(item.get("_ansible_item_label", item.get("item", ""))),
                      *_shown(item)]
        if result.get("failed"):
            shown += _strings({k: v for k, v in result.items()
                               if k not in ("results", "invocation", "warnings", "deprecations")})
        return shown
    if result.get("failed") or result.get("unreachable") or result.get("_ansible_verbose_always"):
        shown += _strings({k: v for k, v in result.items()
                           if k not in ("invocation", "warnings", "deprecations")})
    return shown


def _run_hosts(role: str, cases: dict[str, dict[str, object]], tmp_path: Path,
               extra: dict[str, object] | None = None, *args: str,
               env_: dict[str, str] | None = None) -> dict[str, HostRun]:
    """Run `role` once (check mode) on one local host per case, each case's variables its
    host vars (public role variables, which a role's defaults give way to); `extra` (-e)
    is shared by every host. Returns each case's own results."""
    hosts = {f"case{i}": {"ansible_connection": "local",
                          "ansible_python_interpreter": sys.executable, **variables}
             for i, variables in enumerate(cases.values())}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    play = tmp_path / "play.yml"
    play.write_text(f"- hosts: all\n  gather_facts: false\n  roles:\n    - role: {role}\n")
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps(extra or {}))
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="json", **(env_ or {}))
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), "--check", "--forks", str(len(hosts)),
         str(play), "-e", f"@{extra_file}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    raw = proc.stdout + proc.stderr
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"no JSON report from ansible-playbook: {raw}") from None
    results: dict[str, HostRun] = {}
    for case, host in zip(cases, hosts, strict=True):
        lines, failed_task, failed_text, changed, warnings = [], None, "", [], []
        for task in (t for p in doc["plays"] for t in p["tasks"]):
            result = task["hosts"].get(host)
            if result is None:
                continue
            lines += [f"TASK [{task['task']['name']}]", *_shown(result)]
            if result.get("failed") and failed_task is None:
                failed_task = task["task"]["name"]
                failed_text = "\n".join(_shown(result))
            if result.get("changed"):
                changed.append(task["task"]["name"])
            warnings += _strings(result.get("warnings", []))
        stats = doc["stats"].get(host, {})
        results[case] = HostRun(
            failures=stats.get("failures", -1), unreachable=stats.get("unreachable", -1),
            changed=stats.get("changed", -1), failed_task=failed_task, failed_text=failed_text,
            changed_tasks=tuple(changed), warnings=tuple(warnings),
            text="\n".join(lines), raw=raw)
    return results


CASES = {
    "tcp_rmem not three integers": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 87380"}},
        "net_sysctl_settings['net.ipv4.tcp_rmem'] must be three ascending integers",
    ),
    "tcp_wmem not ascending": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.ipv4.tcp_wmem": "4096 65536 1024"}},
        "net_sysctl_settings['net.ipv4.tcp_wmem'] must be three ascending integers",
    ),
    "MTU 100000": (
        "net_mtu",
        {"net_mtu_interfaces": [{"name": "ens1f0np0", "mtu": 100000}]},
        'net_mtu_interfaces[0]: needs "mtu"',
    ),
    "interface name that would add udev keys": (
        "net_mtu",
        {"net_mtu_interfaces": [{"name": 'q",NAME="pwn', "mtu": 9000}]},
        "a name has only",
    ),
    "sysctl value with a line break": (
        "net_sysctl",
        {"net_sysctl_settings_overrides": {"net.core.rmem_max": "1\nkernel.core_pattern = |/bin/sh"}},
        "values must be non-empty single-line",
    ),
    "roce_qos interface with shell characters": (
        "roce_qos",
        {"roce_qos_interfaces": ["eth0;reboot"]},
        "roce_qos_interfaces must be interface names",
    ),
    "PFC priority 9": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [9], "roce_qos_ecn_priorities": []},
        "roce_qos_pfc_priorities must be distinct priorities 0-7",
    ),
    "ECN on a priority without PFC": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [3], "roce_qos_ecn_priorities": [4]},
        "roce_qos_ecn_priorities [4] must be priorities 0-7 that are also in",
    ),
    "two lossless priorities not allowed": (
        "roce_qos",
        {"roce_qos_pfc_priorities": [3, 4]},
        "roce_qos_pfc_priorities has 2 lossless priorities",
    ),
    "NCCL_IB_TC out of range": (
        "nccl_config",
        {"nccl_config_ib_tc": 300},
        "nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255",
    ),
}


ROCE_QOS_WARN = {
    "rdma_cm_tos 32": ({"roce_qos_rdma_cm_tos": 32},
                       "WARNING: ToS 32 (roce_qos_rdma_cm_tos) maps to priority 1"),
    "defaults": ({}, None),
}
NCCL_CONFIG_WARN = {
    "unknown NCCL variable": ({"nccl_config_extra": {"NCCL_NOT_A_REAL_KNOB": "1"}},
                              "NCCL_NOT_A_REAL_KNOB"),
    "defaults": ({}, None),
}


def _cases(role: str) -> dict[str, dict[str, object]]:
    return {case: extra for case, (r, extra, _message) in CASES.items() if r == role}


@pytest.fixture(scope="module")
def net_sysctl_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    """One net_sysctl run: CASES' hosts and the three that need the node read. The node read
    (every host's: private roots are role vars, so -e) is a fake /proc/sys with no kernel
    modules (cubic, the congestion control they ask for, is built in); CASES' hosts fail in
    the input checks before it."""
    tmp = tmp_path_factory.mktemp("net_sysctl")
    return _run_hosts("net_sysctl", {
        **_cases("net_sysctl"),
        "unknown congestion control": {"net_sysctl_tcp_congestion_control": "vegas2"},
        "required key missing": {"net_sysctl_required": ["net.core.netdev_max_backlog"],
                                 "net_sysctl_tcp_congestion_control": "cubic"},
        "keys this node lacks": {"net_sysctl_tcp_congestion_control": "cubic",
                                 "net_sysctl_file": str(tmp / "90-net.conf")},
    }, tmp, {"__net_sysctl_proc_root": str(_fake_proc(tmp)),
             "__net_sysctl_modules_root": str(tmp / "no-modules"),
             "__net_sysctl_modules_load_file": str(tmp / "modules-load.conf")})


@pytest.fixture(scope="module")
def net_mtu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    return _run_hosts("net_mtu", _cases("net_mtu"), tmp_path_factory.mktemp("net_mtu"))


@pytest.fixture(scope="module")
def roce_qos_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    """One roce_qos run: CASES' hosts and ROCE_QOS_WARN's, on a sysfs tree with no PCI
    device and no vendor tool (CASES' hosts fail in the input checks before reading it)."""
    tmp = tmp_path_factory.mktemp("roce_qos")
    sysfs = tmp / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    return _run_hosts("roce_qos", {
        **_cases("roce_qos"), **{f"warn: {c}": extra for c, (extra, _w) in ROCE_QOS_WARN.items()},
    }, tmp, {"__roce_qos_sysfs_root": str(sysfs),
             "__roce_qos_mlnx_qos": "nodetune-no-such-mlnx-qos"})


@pytest.fixture(scope="module")
def nccl_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nccl_config")


@pytest.fixture(scope="module")
def nccl_config_runs(nccl_config_dir: Path) -> dict[str, HostRun]:
    """One nccl_config run: CASES' host, NCCL_CONFIG_WARN's and the no-op's, each host
    with a config file of its own under a temporary directory (none exists before)."""
    tmp = nccl_config_dir
    return _run_hosts("nccl_config", {
        **_cases("nccl_config"),
        **{f"warn: {c}": {**extra, "nccl_config_path": str(tmp / f"warn-{i}.conf")}
           for i, (c, (extra, _w)) in enumerate(NCCL_CONFIG_WARN.items())},
        "no-op": {"nccl_config_path": str(tmp / "no-op.conf")},
    }, tmp)


def _role_runs(request: pytest.FixtureRequest, role: str) -> dict[str, HostRun]:
    runs: dict[str, HostRun] = request.getfixturevalue(f"{role}_runs")
    return runs


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_in_the_assert_step(case: str, request: pytest.FixtureRequest) -> None:
    role, _extra, message = CASES[case]
    run = _role_runs(request, role)[case]
    assert run.failures > 0, (case, run.raw)
    assert message in run.text, (case, run.text)
    assert run.changed == 0, (case, run.raw)
    # Failed in one of the role's "Check ..." input tasks, before any probe.
    assert run.failed_task is not None and run.failed_task.startswith(f"{role} : Check"), \
        (case, run.failed_task)


def test_unknown_congestion_control_lists_available(
        net_sysctl_runs: dict[str, HostRun]) -> None:
    run = net_sysctl_runs["unknown congestion control"]
    assert run.failures > 0, run.raw
    assert (
        "net_sysctl_tcp_congestion_control: 'vegas2' is not available on this node; available: reno, cubic"
        in run.text
    ), run.text
    assert run.changed == 0, run.raw


def test_required_key_missing_fails_naming_it(net_sysctl_runs: dict[str, HostRun]) -> None:
    run = net_sysctl_runs["required key missing"]
    assert run.failures > 0, run.raw
    assert (
        "net_sysctl_required: key(s) net.core.netdev_max_backlog cannot be set on this node"
        in run.text
    ), run.text


def test_keys_this_node_lacks_are_skipped_and_named(
        net_sysctl_runs: dict[str, HostRun]) -> None:
    # The fake /proc/sys has three keys; the role's defaults ask for more. Check mode:
    # the probe's warning (this host's own) names what it skips, and the run goes on.
    run = net_sysctl_runs["keys this node lacks"]
    assert run.failures == 0 and run.unreachable == 0, run.raw
    [warning] = [" ".join(w.split()) for w in run.warnings
                 if w.startswith("Skipping what this node cannot set.")] or [run.raw]
    assert warning.startswith("Skipping what this node cannot set."), run.warnings
    assert "net.core.wmem_max" in warning.split("Skipping what this node cannot set.")[1], \
        warning


@pytest.mark.parametrize("case", list(ROCE_QOS_WARN))
def test_roce_qos_warns_when_rdma_traffic_misses_the_lossless_priority(
        case: str, roce_qos_runs: dict[str, HostRun]) -> None:
    warned = ROCE_QOS_WARN[case][1]
    run = roce_qos_runs[f"warn: {case}"]
    out = " ".join(run.text.split())
    assert run.failures == 0 and run.unreachable == 0, (case, run.raw)
    if warned:
        assert warned in out and "not in roce_qos_pfc_priorities [3]" in out, (case, out)
    else:
        assert "WARNING: ToS" not in out, (case, out)


@pytest.mark.parametrize("case", list(NCCL_CONFIG_WARN))
def test_nccl_config_warns_about_variables_it_does_not_know(
        case: str, nccl_config_runs: dict[str, HostRun]) -> None:
    warned = NCCL_CONFIG_WARN[case][1]
    run = nccl_config_runs[f"warn: {case}"]
    out = " ".join(run.text.split())
    assert run.failures == 0 and run.unreachable == 0, (case, run.raw)
    if warned:
        # A result string (the task's msg) starts "WARNING: " and names the variable.
        assert re.search(r"^WARNING: ", run.text, re.MULTILINE), (case, out)
        assert warned in out.split("WARNING: ", 1)[1], (case, out)
    else:
        assert "WARNING: " not in out, (case, out)


def _roce_qos_without_hardware(tmp_path: Path, cases: dict[str, dict[str, object]],
                               *tags: str) -> dict[str, HostRun]:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    return _run_hosts(
        "roce_qos", cases, tmp_path,
        {"__roce_qos_sysfs_root": str(sysfs),
         "__roce_qos_configfs_root": str(tmp_path / "configfs"),
         "__roce_qos_mlnx_qos": "nodetune-no-such-mlnx-qos"},
        *tags,
        env_={"NODETUNE_FACTS_SYSFS": str(sysfs)},  # node_facts reads the same tree
    )


@pytest.fixture(scope="module")
def roce_qos_no_hardware_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    """One roce_qos run without a NIC or the vendor tool: a host as the defaults leave it
    and one with roce_qos_force."""
    return _roce_qos_without_hardware(tmp_path_factory.mktemp("roce_qos_no_hw"),
                                      {"defaults": {}, "forced": {"roce_qos_force": True}})


def test_roce_qos_without_hardware_reports_and_skips(
        roce_qos_no_hardware_runs: dict[str, HostRun]) -> None:
    run = roce_qos_no_hardware_runs["defaults"]
    assert run.failures == 0 and run.unreachable == 0, run.raw
    assert "Skipping RoCE QoS: no Mellanox/NVIDIA NIC (PCI 15b3)" in run.text, run.text
    assert "mlnx_qos -i IF --pfc 0,0,0,1,0,0,0,0" in run.text, run.text
    # Used alone, the role includes node_facts (whose install is the one predicted
    # change) and changes nothing of its own.
    assert run.changed_tasks == ("node_facts : Install and gather the nodetune local fact",), \
        run.raw


@pytest.mark.parametrize("tags", [[], ["--tags", "nccl_config"]])
def test_roce_qos_forced_without_the_vendor_tool_fails_naming_it(
        tmp_path: Path, tags: list[str],
        request: pytest.FixtureRequest) -> None:
    if tags:
        run = _roce_qos_without_hardware(tmp_path, {"forced": {"roce_qos_force": True}},
                                         *tags)["forced"]
    else:  # the run the no-hardware test's host shares
        run = request.getfixturevalue("roce_qos_no_hardware_runs")["forced"]
    assert run.failures > 0, (tags, run.raw)
    assert "roce_qos_force is true but nodetune-no-such-mlnx-qos is not installed" in \
        run.text, (tags, run.text)
    assert run.changed_tasks == ("node_facts : Install and gather the nodetune local fact",), \
        (tags, run.raw)


def test_nccl_config_with_nothing_set_and_no_file_is_a_no_op(
        nccl_config_runs: dict[str, HostRun], nccl_config_dir: Path) -> None:
    # Regression: removing the managed block from a missing /etc/nccl.conf failed.
    run = nccl_config_runs["no-op"]
    assert run.failures == 0 and run.unreachable == 0, run.raw
    assert not (nccl_config_dir / "no-op.conf").exists()


FACTS = {"os_family": "Debian", "distribution_major_version": "4", "distribution_version": "4",
         "distribution_release": "x", "architecture": "x86_64"}


def test_ofed_on_an_unsupported_os_says_so(tmp_path: Path) -> None:
    facts = {**FACTS, "distribution": "Plan9", "os_family": "Plan9"}
    out = _run("ofed", {"ansible_facts": facts}, tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "ofed: unsupported OS Plan9 (Plan9 family)" in text, text


def test_ofed_on_ubuntu_takes_the_debian_family_vars(tmp_path: Path) -> None:
    out = _run("ofed", {"ansible_facts": {**FACTS, "distribution": "Ubuntu"}}, tmp_path)
    text = out.stdout + out.stderr
    assert "TASK [ofed : Check the role's inputs]" in text, text
    assert "unsupported OS" not in text, text


def test_a_role_param_of_your_own_playbook_is_checked_after_the_inputs_pass(
        tmp_path: Path) -> None:
    # inputs.yml checked net_mtu on the inventory's values (none set: fine); the play
    # after it gives the role a parameter that pass never saw. nodetune's own plays
    # let a role skip checks the pass ran; a playbook of your own must not.
    bad = 'q",NAME="pwn'
    play = tmp_path / "own.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT}/playbooks/inputs.yml\n"
        "  vars: {nodetune_input_roles: [net_mtu]}\n"
        "- hosts: localhost\n  gather_facts: false\n  roles:\n"
        f"    - role: net_mtu\n      vars: {{net_mtu_interfaces: [{{name: '{bad}', mtu: 9000}}]}}\n")
    env = ansible_env()
    result = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", "-c", "local", "--check", str(play),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", "nodetune_hosts=localhost"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    out = result.stdout + result.stderr
    # The pass ran (its one task checks every selected role's "validate" entry point).
    assert "TASK [Check every selected role's variables against its argument spec]" in out, out
    assert result.returncode != 0 and "a name has only" in out, out
    failed_task = out.split("fatal:")[0].rsplit("TASK [", 1)[1].split("]")[0]
    assert failed_task.startswith("net_mtu : Check"), failed_task
