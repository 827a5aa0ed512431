"""The run-time health checks on real output formats (fixtures: tests/fixtures/check/health,
whose README cites each format's source), each with a failing variant."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from nodetune.ansible.inventory import Host
from nodetune.ansible.role_defaults import Value
from nodetune.check import (
    dcgm,
    gpu_fabric,
    health,
    node_health,
    nvidia_smi,
    pcie_acs,
    rdma_errors,
    signal_read,
    xid,
)
from nodetune.check.model import Status
from nodetune.errors import InputError
from nodetune.measure import node_inputs, rdma_bw

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check"
HEALTH = FIX / "health"
H200 = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
H100 = (FIX / "h100-x1" / "nvidia-smi-q-x.xml").read_text()
BOOT = 1_790_000_000.0  # /proc/stat btime of the fixture's kernel log


def kmsg() -> list[str]:
    return (HEALTH / "kmsg-xid.txt").read_text().splitlines()


# --- gpu.xid ----------------------------------------------------------------------------

def test_xid_lines_parse_with_their_time_and_gpu() -> None:
    events = xid.parse(kmsg(), BOOT)
    assert [e.xid for e in events] == [13, 31, 48, 154, 79]
    dbe = events[2]
    assert dbe.pci == "0000:2a:00" and dbe.when == BOOT + 900.0
    assert dbe.fatal and dbe.action == xid.RESET_OR_REBOOT and "double bit" in dbe.meaning.lower()
    assert not events[0].fatal and not events[1].fatal  # 13 and 31: application
    assert events[3].fatal  # 154: "to 0x4 (Drain and Reset)"
    assert events[4].action == xid.REBOOT


def test_xid_fails_naming_gpu_xid_meaning_and_time() -> None:
    log = {"source": "/dev/kmsg", "records": kmsg(), "boot_time": BOOT}
    r = xid.judge(log, None, None, "")
    assert r.status is Status.FAIL
    assert r.measured == "Xid 48, Xid 79, Xid 154"
    assert "GPU at 0000:9b:00: Xid 79 GPU has fallen off the bus at 2026-" in r.message
    assert "needs node reboot" in r.message
    assert "Xid Catalog" in r.source and "since boot" in r.expected


def test_xid_names_the_gpu_index_from_nvidia_smi() -> None:
    smi = nvidia_smi.parse_smi_xml(H200)  # GPU 1 is 00000000:00:07.0
    line = "4,1,5000000,-;NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, GPU has fallen off the bus."
    r = xid.judge({"records": [line], "boot_time": BOOT}, smi, None, "")
    assert r.status is Status.FAIL and r.message.startswith("GPU 1 (0000:00:07): Xid 79")


def test_application_xids_warn_and_the_window_starts_at_the_previous_clean_check() -> None:
    log = {"records": kmsg(), "boot_time": BOOT}
    after_dbe = BOOT + 1000.0  # the 13/31/48/154 records are older: only 79 is new
    r = xid.judge(log, None, after_dbe, "the check of T")
    assert r.status is Status.FAIL and r.measured == "Xid 79" and "since the check of T" in \
        r.expected
    only_app = {"records": kmsg()[:3], "boot_time": BOOT}
    w = xid.judge(only_app, None, None, "")
    assert w.status is Status.WARN and "restart the application" in w.message
    clean = xid.judge(log, None, BOOT + 2000.0, "the check of T")
    assert clean.status is Status.PASS and clean.measured == "no Xid since the check of T"
    # A check from before this boot does not hide what happened since boot.
    old = xid.judge(log, None, BOOT - 50.0, "the check of T")
    assert old.status is Status.FAIL and "since boot" in old.expected


def test_xid_actions_follow_the_catalogues_immediate_action() -> None:
    """NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
    read 2026-11-26): 94 RESTART_APP, 109 RESET_GPU, 38/63/92 IGNORE, 54 CHECK_MECHANICALS,
    143 RESET_GPU; 154 names its own action."""
    def status(xid_no: int, text: str = "x") -> Status:
        line = f"4,1,5,-;NVRM: Xid (PCI:0000:01:00): {xid_no}, {text}"
        return xid.judge({"records": [line], "boot_time": BOOT}, None, None, "").status

    for warn in (13, 31, 38, 43, 45, 63, 92, 94, 121):
        assert status(warn) is Status.WARN, warn
    for fail in (46, 48, 54, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143):
        assert status(fail) is Status.FAIL, fail
    assert status(154, "GPU recovery action changed from 0x2 (Node Reboot Required) to "
                       "0x0 (None)") is Status.WARN
    assert status(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot "
                       "Required)") is Status.FAIL


def test_unreadable_kernel_log_skips_with_the_reason() -> None:
    r = xid.judge({"error": "/dev/kmsg: Permission denied"}, None, None, "")
    assert r.status is Status.SKIP and "Permission denied" in r.message


def test_unknown_xid_warns_not_passes() -> None:
    line = "4,1,5,-;NVRM: Xid (PCI:0000:01:00): 999, pid=1, name=x, something new"
    assert xid.judge({"records": [line], "boot_time": BOOT}, None, None, "").status is \
        Status.WARN


def test_node_reader_reads_a_kmsg_format_file(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    shutil.copy(HEALTH / "kmsg-xid.txt", path)
    log = node_health.kernel_log(str(path))
    assert log["error"] is None and len(log["records"]) == 5  # the lines naming Xid
    assert isinstance(log["boot_time"], float)
    missing = node_health.kernel_log(str(tmp_path / "none"))
    assert missing["error"] and missing["records"] == []


# --- fabric.rdma_errors -----------------------------------------------------------------

def ports() -> list[dict[str, object]]:
    return node_health.rdma_counters(str(HEALTH / "sysfs-infiniband"))


def test_sysfs_counter_tree_is_read() -> None:
    p = ports()
    assert [rdma_errors.port_key(x) for x in p] == ["mlx5_0/1", "mlx5_1/1"]
    assert p[0]["state"] == "4: ACTIVE" and p[1]["counters"]["link_downed"] == "14"
    assert rdma_errors.counters_of(p)["mlx5_1/1"]["symbol_error"] == 65535


def test_counters_over_the_limit_fail_the_port_only() -> None:
    by = {r.name: r for r in rdma_errors.judge(ports(), None, "", "/sys/class/infiniband")}
    assert by["fabric.rdma_errors[mlx5_0/1]"].status is Status.PASS
    bad = by["fabric.rdma_errors[mlx5_1/1]"]
    assert bad.status is Status.FAIL
    assert "link_downed 14 >= 10" in bad.message and "symbol_error 65535 >= 10" in bad.message
    assert "link_error_recovery" not in bad.message  # 9 is within its limit
    assert "ibcheckerrs" in bad.source
    # ibcheckerrs.in flags a counter at its threshold ($2 >= th[$1]), not only above it
    at = [{"device": "mlx5_2", "port": "1", "counters": {"symbol_error": "10"}}]
    (r,) = rdma_errors.judge(at, None, "", "/sys/class/infiniband")
    assert r.status is Status.FAIL and "symbol_error 10 >= 10" in r.message


def test_a_flap_since_the_previous_check_fails_and_other_rises_warn() -> None:
    before = {"mlx5_0/1": {"link_downed": 0, "symbol_error": 0, "link_error_recovery": 0,
                           "port_rcv_errors": 0}}
    now = [{"device": "mlx5_0", "port": "1",
            "counters": {"link_downed": "1", "symbol_error": "0", "link_error_recovery": "0",
                         "port_rcv_errors": "0"}}]
    (r,) = rdma_errors.judge(now, before, "the check of T", "/sys/class/infiniband")
    assert r.status is Status.FAIL and "link_downed +1" in r.message
    assert "went down or retrained since the check of T" in r.message
    now[0]["counters"] = {"link_downed": "0", "symbol_error": "3", "link_error_recovery": "0",
                          "port_rcv_errors": "0"}
    (w,) = rdma_errors.judge(now, before, "the check of T", "/sys/class/infiniband")
    assert w.status is Status.WARN and "symbol_error +3" in w.message
    (p,) = rdma_errors.judge(now, {"mlx5_0/1": {"symbol_error": 3}}, "T", "/x")
    assert p.status is Status.PASS


def _rdma_since(saved: object, how: str, tmp_path: Path) -> list[tuple[Status, str]]:
    """fabric.rdma_errors through health.judge, counting from ``saved`` as the run history,
    --previous-file or the node-local previous.json brings it back."""
    from nodetune.check import local_state
    from nodetune.check.gpu_read import read

    if how == "history":
        prev = health.previous("n1", [{"run_id": "r1", "started": "t1", "health": {"n1": {
            "time": 100.0, "xid": "pass", "rdma_counters": saved}}}])
    elif how == "previous-file":
        prev = health.previous_from({"xid_since": None, "counters": saved,
                                     "counters_time": 100.0, "counters_what": "T"}, source="f")
    else:
        local_state.save(tmp_path, "n1", "boot", local_state.State(), {
            "time": 100.0, "xid": "pass", "rdma_counters": saved}, out_of_service=False)
        prev = local_state.previous(local_state.load(tmp_path, "n1", "boot"))
    assert prev.of(rdma_errors.NAME).state == {"rdma_counters": saved}  # kept as it came
    now = [{"device": "mlx5_0", "port": "1", "counters": {"link_downed": "1"}}]
    results, _state = health.judge({"rdma_counters": now}, {}, read({}), 1,
                                   node_inputs.inputs(Host("n1", (), {})), None, prev)
    return [(r.status, r.message) for r in results if r.name.startswith(rdma_errors.NAME)]


@pytest.mark.parametrize("how", ["history", "previous-file", "previous.json"])
def test_malformed_saved_rdma_counters_count_as_none(how: str, tmp_path: Path) -> None:
    """A saved port that is no object, or a counter that is no integer, is left out, as
    node.pcie_aer's and gpu.nvlink_errors' are: that port has no previous counters."""
    for saved in ({"mlx5_0/1": 5}, {"mlx5_0/1": {"link_downed": "x"}},
                  {"mlx5_0/1": {"link_downed": True}}, {"mlx5_0/1": [0]}):
        assert _rdma_since(saved, how, tmp_path) == [(Status.PASS, "")], saved
    assert rdma_errors.previous_counters({"mlx5_0/1": 5, "mlx5_1/1": {
        "link_downed": "x", "symbol_error": 2}}) == {"mlx5_1/1": {"symbol_error": 2}}
    assert rdma_errors.previous_counters([1]) is None
    # well-formed, the same reading counts from them
    ((status, message),) = _rdma_since({"mlx5_0/1": {"link_downed": 0}}, how, tmp_path)
    assert status is Status.FAIL and "link_downed +1" in message


def test_no_rdma_port_skips() -> None:
    (r,) = rdma_errors.judge([], None, "", "/sys/class/infiniband")
    assert r.status is Status.SKIP and "/sys/class/infiniband is empty" in r.message


# --- dcgm.diag --------------------------------------------------------------------------

def test_dcgm_pass_and_failing_tests_named_with_dcgms_message() -> None:
    ok = dcgm.judge({"tool": "/usr/bin/dcgmi", "level": 1, "rc": 0,
                     "stdout": (HEALTH / "dcgmi-diag-r1-pass.json").read_text()})
    assert ok.status is Status.PASS and "DCGM 4.2.3, level 1" in ok.measured  # metadata
    bad = dcgm.judge({"tool": "/usr/bin/dcgmi", "level": 2, "rc": 226,
                      "stdout": (HEALTH / "dcgmi-diag-r2-fail.json").read_text()})
    assert bad.status is Status.FAIL
    assert bad.message.startswith("PCIe on GPU 1: Error using CUDA API cudaMemcpy")
    assert "Persistence Mode" not in bad.message  # a warning is not a failure
    assert "DCGM 3.3.5, level 2" in bad.measured
    _version, rows = dcgm.parse((HEALTH / "dcgmi-diag-r2-fail.json").read_text())
    persistence = next(r for r in rows if r[0] == "Persistence Mode")
    # 3.x Deployment results carry "warnings" as one string, read whole
    assert persistence[1:3] == ("node", "Warn") and persistence[3].startswith(
        "Persistence mode for GPU 1 is disabled.")


def test_dcgm_4_failure_summary_and_runtime_error() -> None:
    bad = dcgm.judge({"tool": "dcgmi", "level": 1, "rc": 226,
                      "stdout": (HEALTH / "dcgmi-diag-r1-fail-v4.json").read_text()})
    assert bad.status is Status.FAIL and "DCGM 4.2.3" in bad.measured
    assert bad.message.startswith("software on GPU 1: GPU 1 had memory errors and row "
                                  "remappings are pending")
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "software", "results": [{"entity_group": "GPU", "entity_group_id": 1,
                                          "entity_id": 0, "status": "Pass"}],
         "test_summary": {"status": "Fail", "warnings": [{"warning": "no entity"}]}}]}]},
           "metadata": {"version": "4.2.3"}}
    summary = dcgm.judge({"tool": "dcgmi", "level": 1, "rc": 226, "stdout": json.dumps(doc)})
    assert summary.status is Status.FAIL and summary.message == "software on node: no entity"
    err = {"DCGM Diagnostic": {"runtime_error": "Unable to start the diagnostic",
                               "version": "4.2.3"}}
    r = dcgm.judge({"tool": "dcgmi", "level": 1, "rc": 255, "stdout": json.dumps(err)})
    assert r.status is Status.FAIL and "Unable to start the diagnostic" in r.message


def test_dcgm_absent_skips_and_garbage_fails() -> None:
    assert dcgm.judge({"tool": None, "level": 1}).status is Status.SKIP
    r = dcgm.judge({"tool": "/usr/bin/dcgmi", "level": 1, "rc": 255, "stdout": "",
                    "stderr": "Error: unable to establish a connection to the specified host"})
    assert r.status is Status.FAIL and "unable to establish" in r.message


def test_dcgm_version_4_layout_is_read() -> None:
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 3,
                                        "status": "Fail", "warnings": [{"warning": "boom"}]}]}]}]},
           "version": "4.2.3"}
    r = dcgm.judge({"tool": "dcgmi", "level": 1, "rc": 0, "stdout": json.dumps(doc)})
    assert r.status is Status.FAIL and r.message == "memory on GPU 3: boom"


# --- gpu.pcie_acs -----------------------------------------------------------------------

def lspci(name: str) -> dict[str, object]:
    return {"rc": 0, "stdout": (HEALTH / name).read_text(), "stderr": ""}


def test_acs_on_a_switch_port_between_gpu_and_nic_fails_naming_the_bridge() -> None:
    r = pcie_acs.judge(lspci("lspci-acs-on.txt"))
    assert r.status is Status.FAIL
    assert r.measured == "SrcValid+ on 0000:17:00.0, 0000:17:01.0"
    assert "bridge 0000:17:00.0 (Broadcom / LSI PEX890xx" in r.message
    assert "GPU 0000:19:00.0 - NIC 0000:18:00.0" in r.message
    assert "0000:17:02.0" not in r.message  # the NVMe's port is not on the path
    assert "0000:15:01.0" not in r.message  # nor the root port above the switch


def test_acs_off_passes_and_missing_pieces_skip() -> None:
    r = pcie_acs.judge(lspci("lspci-acs-off.txt"))
    assert r.status is Status.PASS and r.measured == "SrcValid off on 3 bridge(s)"
    assert pcie_acs.judge(None).status is Status.SKIP
    no_nic = lspci("lspci-acs-on.txt")
    no_nic["stdout"] = str(no_nic["stdout"]).replace("Infiniband controller", "Serial bus")
    assert pcie_acs.judge(no_nic).status is Status.SKIP


# --- gpu.fabric and gpu.kernel_module ---------------------------------------------------

def test_fabric_completed_passes_and_a_pending_one_fails() -> None:
    smi = nvidia_smi.parse_smi_xml(H200)
    r = gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(H200), {"nvswitches": 0})
    assert r.status is Status.PASS and r.measured == "4/4 GPUs Completed/Success"
    bad = H200.replace("<state>Completed</state>", "<state>In Progress</state>", 1)
    f = gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(bad), {"nvswitches": 0})
    assert f.status is Status.FAIL and "GPU 0: fabric In Progress/Success" in f.message


def test_nvswitch_board_needs_fabric_manager_at_the_drivers_version() -> None:
    smi = nvidia_smi.parse_smi_xml(H200)
    fm = {"nvswitches": 4, "active": "active",
          "version": "Fabric Manager version is : 580.159.04"}
    assert gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(H200), fm).status is Status.PASS
    r = gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(H200), {**fm, "active": "failed",
                                            "version": "Fabric Manager version is : 570.86.15"})
    assert r.status is Status.FAIL
    assert "nvidia-fabricmanager is failed" in r.message and "570.86.15 is not" in r.message


def test_fabric_status_other_than_success_fails_and_na_leaves_fabric_manager_alone() -> None:
    smi = nvidia_smi.parse_smi_xml(H200)
    # Completed with an error status, as Azure/azhpc-images#506 shows it on a real node
    bad = H200.replace("<status>Success</status>", "<status>Insufficient Resources</status>", 1)
    r = gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(bad), {"nvswitches": 0})
    assert r.status is Status.FAIL and "GPU 0: fabric Completed/Insufficient Resources" in \
        r.message
    # An A100 HGX board: NVSwitches, Fabric Manager running, nvidia-smi's fabric N/A
    # (bottlerocket-os/bottlerocket#3873 on p4d): Fabric Manager is what is judged.
    na = re.sub(r"<state>[^<]*</state>", "<state>N/A</state>", H200)
    na = re.sub(r"<fabric>(\s*)<state>N/A</state>(\s*)<status>[^<]*</status>",
                r"<fabric>\1<state>N/A</state>\2<status>N/A</status>", na)
    fm = {"nvswitches": 6, "active": "active",
          "version": "Fabric Manager version is : 580.159.04"}
    assert gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(na), fm).status is Status.PASS
    assert gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(na), {**fm, "active": "inactive"}).status is \
        Status.FAIL


def test_no_fabric_skips_on_the_single_h100() -> None:
    smi = nvidia_smi.parse_smi_xml(H100)
    r = gpu_fabric.judge_fabric(smi, nvidia_smi.fabric_states(H100), {"nvswitches": 0})
    assert r.status is Status.SKIP and "not an NVLink-fabric system" in r.message


def test_kernel_module_flavour_and_peermem() -> None:
    smi = nvidia_smi.parse_smi_xml(H100)
    want = Value("nvidia_driver_kernel_modules", "open", False)
    on = Value("nvidia_driver_peermem_enabled", True, False)
    port = [{"device": "mlx5_0", "port": "1"}]
    ok = gpu_fabric.judge_module(smi, "open", want, False, [], on)
    assert ok.status is Status.PASS and "no RDMA port" in ok.message
    assert gpu_fabric.judge_module(smi, "open", want, True, port, on).status is Status.PASS
    miss = gpu_fabric.judge_module(smi, "open", want, False, port, on)
    assert miss.status is Status.FAIL and "nvidia_peermem is not loaded" in miss.message
    other = gpu_fabric.judge_module(smi, "proprietary", want, False, [], on)
    assert other.status is Status.WARN  # only the role default asks for open
    pinned = Value("nvidia_driver_kernel_modules", "open", True)
    assert gpu_fabric.judge_module(smi, "proprietary", pinned, False, [], on).status is \
        Status.FAIL


# --- fabric.rdma_bw ---------------------------------------------------------------------

def test_ib_write_bw_reports_parse_in_gbits() -> None:
    r = rdma_bw.parse((HEALTH / "ib_write_bw-ndr400.txt").read_text(), device="mlx5_0",
                      cuda=False)
    assert (r.size, r.avg_gbps, r.peak_gbps) == (65536, 392.51, 392.7)
    m = rdma_bw.parse((HEALTH / "ib_write_bw-mbsec.txt").read_text(), device="mlx5_1",
                      cuda=True)
    assert m.avg_gbps == pytest.approx(23398.07 * 8 * 1048576 / 1e9, abs=0.01)
    # perftest >= 24.07 names the same 2^20-byte unit MiB/sec (linux-rdma/perftest 1d202bb)
    mib = rdma_bw.parse((HEALTH / "ib_write_bw-mibsec.txt").read_text(), device="mlx5_1",
                        cuda=False)
    assert mib.avg_gbps == pytest.approx(46770.13 * 8 * 1048576 / 1e9, abs=0.01)
    assert rdma_bw.judge(mib, 400.0, "gpu-2").status is Status.PASS
    with pytest.raises(ValueError, match="Couldn't connect"):
        rdma_bw.parse((HEALTH / "ib_write_bw-refused.txt").read_text(), device="mlx5_0",
                      cuda=False)


def test_ib_write_bw_pass_mark_is_a_fraction_of_the_port_rate() -> None:
    r = rdma_bw.parse((HEALTH / "ib_write_bw-ndr400.txt").read_text(), device="mlx5_0",
                      cuda=False)
    ok = rdma_bw.judge(r, 400.0, "gpu-2")
    assert ok.status is Status.PASS and ok.expected == ">= 360 Gb/s (0.9 x 400)"
    m = rdma_bw.parse((HEALTH / "ib_write_bw-mbsec.txt").read_text(), device="mlx5_1",
                      cuda=True)
    bad = rdma_bw.judge(m, 400.0, "gpu-2")
    assert bad.status is Status.FAIL and bad.name == "fabric.rdma_bw[mlx5_1/cuda]"
    assert "below 360 (GPU memory)" in bad.message


# --- inputs and history -----------------------------------------------------------------

def test_inputs_refuse_a_path_that_is_not_plain() -> None:
    assert node_inputs.inputs(Host("n1", (), {})).kernel_log == "/dev/kmsg"
    with pytest.raises(InputError, match="nodetune_kernel_log") as exc:
        node_inputs.inputs(Host("n1", (), {"nodetune_kernel_log": "/tmp/x; rm -rf /"}))
    assert exc.value.host == "n1"
    with pytest.raises(InputError, match="nodetune_rdma_sysfs"):
        node_inputs.inputs(Host("n1", (), {"nodetune_rdma_sysfs": "relative/path"}))
    with pytest.raises(InputError, match="nvidia_driver_peermem_enabled"):
        node_inputs.inputs(Host("n1", (), {"nvidia_driver_peermem_enabled": "maybe"}))
    # As the role's argument spec and `| bool` read it (nodetune.ansible.truth).
    said = node_inputs.inputs(Host("n1", (), {"nvidia_driver_peermem_enabled": "no"}))
    assert said.peermem_enabled == Value("nvidia_driver_peermem_enabled", False, True)


def test_previous_check_gives_the_xid_window_and_the_counters() -> None:
    records = [
        {"run_id": "r1", "started": "t1", "health": {"n1": {"time": 100.0, "xid": "pass",
                                                            "rdma_counters": {"a/1": {}}}}},
        {"run_id": "r2", "started": "t2", "health": {"n1": {"time": 200.0, "xid": "fail",
                                                            "rdma_counters": {"a/1": {
                                                                "link_downed": 3}}}}},
        {"run_id": "r3", "started": "t3", "health": {"n2": {"time": 300.0, "xid": "pass"}}},
    ]
    prev = health.previous("n1", records)
    assert prev.xid_since == 100.0 and "(r1)" in prev.xid_what
    rdma = prev.of(rdma_errors.NAME)
    assert rdma.state == {"rdma_counters": {"a/1": {"link_downed": 3}}} and "(r2)" in rdma.what
    assert health.previous("n9", records) == signal_read.Previous()
