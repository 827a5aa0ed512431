"""node.time_sync and node.global_env: the real probe on a stand-in root tree with
stand-in chronyc / timedatectl / systemctl (each prints a documented-format fixture of
tests/fixtures/check/timesync, named there as a stand-in), then the pure judges."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune.ansible.inventory import Host
from nodetune.check import global_env, gpu_read, node_host, probe, timesync
from nodetune.check.expect import MAX_OFFSET_DEFAULT_SOURCE, NCCL_ROLE_VARS, expectations
from nodetune.check.model import CheckResult, Status
from nodetune.check.run import CheckOptions, check_nodes, judge
from nodetune.errors import InputError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "timesync"
CAT = shutil.which("cat") or "/bin/cat"


def tool(bin_: Path, name: str, body: str) -> None:
    """A stand-in executable: a shell script of ``body`` (sees its arguments as $1...)."""
    path = bin_ / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def cat(name: str, rc: int = 0) -> str:
    return f"{CAT} {FIX / name}\nexit {rc}\n"


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    """A stand-in root (etc/) and an empty bin/ that is the probe's whole PATH."""
    (tmp_path / "root/etc/profile.d").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    return tmp_path


def probed(node: Path, **vars_: Any) -> tuple[dict[str, CheckResult], probe.Probe]:
    """Run the real probe under ``node``/root with only ``node``/bin on PATH; judge it."""
    exp = expectations(Host("gpu-1", ("gpu_nodes",), dict(vars_)))
    req = {**probe.request(exp, timeout=20, torch=False), "root": str(node / "root")}
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={"PATH": str(node / "bin")})
    parsed = probe.parse("gpu-1", json.loads(out.stdout))
    return {r.name: r for r in judge(parsed, exp, gpu_read.read(parsed.nvidia))}, parsed


# --- node.time_sync through the probe -------------------------------------------------

def test_chrony_in_sync_passes_and_skew_past_the_limit_fails(node: Path) -> None:
    tool(node / "bin", "chronyc", cat("chronyc-c-tracking-synced.csv"))
    r = probed(node)[0]["node.time_sync"]
    assert r.status is Status.PASS, r
    assert r.measured.startswith("0.007 ms slow (chrony, 203.0.113.15, stratum 3)")
    assert "nodetune_max_clock_offset_ms unset" in r.source
    tool(node / "bin", "chronyc", cat("chronyc-c-tracking-skewed.csv"))
    r = probed(node)[0]["node.time_sync"]
    assert r.status is Status.FAIL, r
    assert "250.4 ms fast of NTP time (limit 100 ms)" in r.message
    # the inventory's limit, named as the source
    r = probed(node, nodetune_max_clock_offset_ms=500)[0]["node.time_sync"]
    assert r.status is Status.PASS and r.source == "nodetune_max_clock_offset_ms (inventory)"


def test_chrony_without_a_source_warns(node: Path) -> None:
    tool(node / "bin", "chronyc", cat("chronyc-c-tracking-unsynced.csv"))
    r = probed(node)[0]["node.time_sync"]
    assert r.status is Status.WARN and "no source" in r.message, r


def test_an_old_chronyc_without_csv_is_read_in_text_form(node: Path) -> None:
    tool(node / "bin", "chronyc", 'case " $* " in *" -c "*) echo "chronyc: invalid option -- '
         "'c'\" >&2; exit 1;; esac\n" + cat("chronyc-tracking.txt"))
    results, parsed = probed(node)
    assert "chrony_text" in timesync.section(parsed)
    assert results["node.time_sync"].status is Status.PASS
    assert results["node.time_sync"].measured.startswith("0.007 ms slow (chrony")


def test_no_chronyd_falls_back_to_timesyncd(node: Path) -> None:
    tool(node / "bin", "chronyc", cat("chronyc-no-daemon.txt", rc=1))
    tool(node / "bin", "timedatectl", 'case "$1" in show) ' + cat("timedatectl-show-synced.txt")
         + ";; timesync-status) " + cat("timedatectl-timesync-status.txt") + ";; esac\n")
    results, parsed = probed(node)
    assert "chrony_text" not in timesync.section(parsed)  # 506: no second chronyc run
    r = results["node.time_sync"]
    assert r.status is Status.PASS, r
    assert r.measured == "+0.364 ms (systemd-timesyncd, 203.0.113.15 (ntp.example.net))"


@pytest.mark.parametrize(("show", "status", "expected", "words"), [
    ("timedatectl-show-synced.txt", "timedatectl-timesync-status-skewed.txt", Status.FAIL,
     "1203.0 ms behind its NTP server (limit 100 ms)"),
    ("timedatectl-show-unsynced.txt", "timedatectl-timesync-status.txt", Status.WARN,
     "has not synchronised the clock"),
])
def test_timesyncd_skew_fails_and_no_sync_warns(node: Path, show: str, status: str,
                                                expected: Status, words: str) -> None:
    tool(node / "bin", "timedatectl", 'case "$1" in show) ' + cat(show)
         + ";; timesync-status) " + cat(status) + ";; esac\n")
    r = probed(node)[0]["node.time_sync"]
    assert r.status is expected and words in r.message, r


def test_neither_tool_skips_with_the_reason(node: Path) -> None:
    results, parsed = probed(node)
    r = results["node.time_sync"]
    assert r.status is Status.SKIP and "neither chronyc" in r.message
    assert timesync.section(parsed) == {"chronyc": None, "timedatectl": None}


# --- node.global_env through the probe -----------------------------------------------

NCCL_CONF = "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5_0,mlx5_1\n"


def test_host_wide_nccl_that_contradicts_provisioning_fails(node: Path) -> None:
    etc = node / "root/etc"
    huge = "NCCL_TOPO_FILE=" + "A" * 200000 + "\n"
    (etc / "environment").write_text((FIX / "environment-hostile.txt").read_text() + huge)
    shutil.copy(FIX / "profile.d-nccl.sh", etc / "profile.d/nccl.sh")
    (etc / "nccl.conf").write_text(NCCL_CONF)
    tool(node / "bin", "systemctl", cat("systemctl-show-environment.txt"))
    results, parsed = probed(node, nccl_config_ib_tc=106)
    r = results["node.global_env"]
    assert r.status is Status.FAIL, r
    assert ("NCCL_SOCKET_IFNAME=eth9 set host-wide in /etc/environment:3 contradicts "
            "NCCL_SOCKET_IFNAME=eth0 in /etc/nccl.conf") in r.message
    assert ("NCCL_IB_TC=41 set host-wide in /etc/profile.d/nccl.sh:3 contradicts "
            "NCCL_IB_TC=106 in nccl_config_ib_tc (inventory)") in r.message
    assert "NCCL takes the environment over its config file" in r.message
    entries = {e["name"]: e for e in global_env.section(parsed)["entries"]}
    # the manager's NCCL_IB_HCA agrees with nccl.conf; the unclosed quote's does not
    assert entries["NCCL_DEBUG_SUBSYS"]["value"] == "INIT,NET ENV"
    assert '"mlx5_0' in r.message and "NCCL_IB_HCA=mlx5_0,mlx5_1 set" not in r.message
    # hostile values: no control character, capped, a bad name dropped
    assert entries["NCCL_ALGO"]["value"] == "?[31mRing?[0m"
    assert len(entries["NCCL_TOPO_FILE"]["value"]) == node_host.VALUE_LIMIT
    assert entries["NCCL_TOPO_FILE"]["truncated"] is True
    assert "NCCL_BAD-NAME" not in r.message + r.measured and "\x1b" not in r.message
    assert entries["CUDA_CACHE_PATH"]["dynamic"] is True
    assert entries["NCCL_NET_GDR_LEVEL"]["value"] == "PHB"  # two on one line
    assert len(r.message) < 4000


def test_other_host_wide_values_warn_and_none_passes(node: Path) -> None:
    (node / "root/etc/environment").write_text("CUDA_DEVICE_ORDER=PCI_BUS_ID\n"
                                               "NCCL_DEBUG=WARN\n")
    r = probed(node)[0]["node.global_env"]
    assert r.status is Status.WARN, r
    assert "CUDA_DEVICE_ORDER, NCCL_DEBUG" in r.message
    assert r.measured.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID (/etc/environment:1)")
    (node / "root/etc/environment").write_text('PATH="/usr/bin:/bin"\n')
    # no systemd as PID 1 (a container): no manager environment there to override anything
    tool(node / "bin", "systemctl", "echo 'Failed to connect to bus' >&2; exit 1\n")
    r = probed(node)[0]["node.global_env"]
    assert r.status is Status.PASS and r.measured == "none set host-wide", r
    assert "not read" not in r.message


def test_a_value_equal_to_what_was_provisioned_only_warns(node: Path) -> None:
    (node / "root/etc/nccl.conf").write_text(NCCL_CONF)
    (node / "root/etc/environment").write_text("NCCL_SOCKET_IFNAME=eth0\n")
    r = probed(node)[0]["node.global_env"]
    assert r.status is Status.WARN and "NCCL_SOCKET_IFNAME" in r.message, r


# --- the judges on the fixtures, and bad input ----------------------------------------

def run_of(name: str, rc: int = 0) -> dict[str, Any]:
    return {"rc": rc, "stdout": (FIX / name).read_text(), "stderr": ""}


def test_the_chrony_and_systemd_formats_parse() -> None:
    assert timesync.chrony_csv((FIX / "chronyc-c-tracking-skewed.csv").read_text()) == {
        "source": "203.0.113.15", "stratum": 3, "slow": -0.250431907, "leap": "Normal"}
    assert timesync.chrony_text((FIX / "chronyc-tracking.txt").read_text()) == {
        "source": "203.0.113.15", "stratum": 3, "slow": 0.000006523, "leap": "Normal"}
    assert timesync.timespan("+4.523ms") == pytest.approx(0.004523)
    assert timesync.timespan("-1min 2.5s") == pytest.approx(-62.5)
    assert timesync.timespan("-364us") == pytest.approx(-0.000364)
    assert timesync.timespan("soon") is None


def test_time_sync_judge_on_the_fixtures() -> None:
    src = MAX_OFFSET_DEFAULT_SOURCE
    ok = timesync.judge({"chronyc": "/usr/bin/chronyc",
                         "chrony": run_of("chronyc-c-tracking-synced.csv")}, 100.0, src)
    assert ok.status is Status.PASS
    tight = timesync.judge({"chronyc": "/usr/bin/chronyc",
                            "chrony": run_of("chronyc-c-tracking-synced.csv")}, 0.001, src)
    assert tight.status is Status.FAIL
    down = timesync.judge({"chronyc": "/usr/bin/chronyc",
                           "chrony": run_of("chronyc-no-daemon.txt", rc=1)}, 100.0, src)
    assert down.status is Status.WARN and "506 Cannot talk to daemon" in down.message
    # synchronised per the kernel but no offset (another daemon, or a container): a warning
    bare = timesync.judge({"timedatectl": "/usr/bin/timedatectl",
                           "show": run_of("timedatectl-show-synced.txt"),
                           "timesync": {"rc": 1, "stdout": "", "stderr": "no timesyncd"}},
                          100.0, src)
    assert bare.status is Status.WARN and "offset not reported" in bare.measured


def test_global_env_judge_on_the_hostile_fixture() -> None:
    text = (FIX / "environment-hostile.txt").read_text()
    entries = node_host.assignments(text, "/etc/environment", script=False)
    assert [e["name"] for e in entries] == ["NCCL_SOCKET_IFNAME", "NCCL_DEBUG",
                                            "CUDA_DEVICE_ORDER", "NCCL_IB_HCA", "NCCL_ALGO"]
    exp = expectations(Host("gpu-1", (), {"nccl_config_socket_ifname": "eth0"}))
    r = global_env.judge({"entries": entries}, None, exp)
    assert r.status is Status.FAIL
    assert "NCCL_SOCKET_IFNAME=eth0 in nccl_config_socket_ifname (inventory)" in r.message
    assert "more" not in r.measured  # five shown
    twice = global_env.judge({"entries": entries * 2, "more": 3}, None, exp)
    assert twice.measured.endswith("; and 8 more")
    clean = expectations(Host("gpu-1", (), {}))
    assert global_env.judge({"entries": entries[2:3]}, None, clean).status is Status.WARN
    assert global_env.judge({"entries": []}, None, clean).status is Status.PASS


@pytest.mark.parametrize(("vars_", "words"), [
    ({"nodetune_max_clock_offset_ms": "fast"}, "nodetune_max_clock_offset_ms 'fast'"),
    ({"nodetune_max_clock_offset_ms": -5}, "nodetune_max_clock_offset_ms -5"),
    ({"nodetune_max_clock_offset_ms": True}, "nodetune_max_clock_offset_ms True"),
    ({"nccl_config_extra": ["NCCL_DEBUG=INFO"]}, "nccl_config_extra ['NCCL_DEBUG=INFO']"),
])
def test_bad_input_names_host_and_variable_and_contacts_no_node(
        vars_: dict[str, object], words: str) -> None:
    with pytest.raises(InputError) as err:
        expectations(Host("gpu-7", (), vars_))
    assert words in str(err.value) and err.value.host == "gpu-7"
    # node-a would be unreachable (exit 3); node-b's variable stops the run first (exit 2)
    hosts = [Host("node-a", (), {"ansible_host": "192.0.2.1"}), Host("node-b", (), vars_)]
    with pytest.raises(InputError) as err:
        check_nodes(hosts, CheckOptions(timeout=1))
    assert err.value.host == "node-b" and words in str(err.value)


def test_the_nccl_keys_compared_are_the_ones_nccl_config_writes() -> None:
    role = Path(__file__).resolve().parents[2] / "roles" / "nccl_config" / "vars" / "main.yml"
    assert yaml.safe_load(role.read_text())["__nccl_config_named"] == NCCL_ROLE_VARS
    exp = expectations(Host("gpu-1", (), {"nccl_config_ib_hca": "mlx5_0",
                                          "nccl_config_extra": {"NCCL_IB_HCA": "mlx5_1",
                                                                "NCCL_IB_DISABLE": True}}))
    assert {k: (v.name, v.value) for k, v in exp.nccl_settings.items()} == {
        "NCCL_IB_HCA": ("nccl_config_extra.NCCL_IB_HCA", "mlx5_1"),
        "NCCL_IB_DISABLE": ("nccl_config_extra.NCCL_IB_DISABLE", True)}
    assert global_env.provisioned(None, exp)["NCCL_IB_DISABLE"] == [
        ("nccl_config_extra.NCCL_IB_DISABLE (inventory)", "1")]


def test_an_offset_that_is_not_a_finite_number_is_not_read() -> None:
    line = (FIX / "chronyc-c-tracking-synced.csv").read_text().split(",")
    line[4] = "nan"
    assert timesync.chrony_csv(",".join(line)) is None
    assert timesync.chrony_text("Reference ID    : CB00710F (ntp.example.net)\nStratum : 3\n"
                                "System time     : 1.2.3 seconds slow of NTP time\n") is None
    assert timesync.timespan("+" + "9" * 400 + "s") is None  # inf: not a reading
    r = timesync.judge({"chronyc": "/usr/bin/chronyc",
                        "chrony": {"rc": 0, "stdout": ",".join(line), "stderr": ""}},
                       100.0, "src")
    assert r.status is not Status.PASS, r


def test_a_manager_environment_that_could_not_be_read_is_not_a_pass(node: Path) -> None:
    tool(node / "bin", "systemctl", "echo 'Access denied' >&2; exit 1\n")
    r = probed(node)[0]["node.global_env"]
    assert r.status is Status.WARN and "not assessed in full" in r.message, r
    assert "Access denied" in r.message


def test_a_value_a_script_computes_may_differ_and_only_warns(node: Path) -> None:
    (node / "root/etc/nccl.conf").write_text(NCCL_CONF)
    (node / "root/etc/profile.d/hca.sh").write_text("export NCCL_IB_HCA=$HCAS\n")
    r = probed(node)[0]["node.global_env"]
    assert r.status is Status.WARN and "may differ, computed when the script runs" in \
        r.message, r
