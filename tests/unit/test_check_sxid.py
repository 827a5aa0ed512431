"""gpu.sxid: NVSwitch SXid records read by the real node reader from a stand-in kernel log
in /dev/kmsg's format (tests/fixtures/check/health/kmsg-sxid.txt; its README names the
driver's format), through the same read gpu.xid uses, then judged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.check import health, node_health, sxid, xid
from nodetune.check.gpu_read import read as read_gpus
from nodetune.check.model import Status
from nodetune.measure import node_inputs

NO_GPUS = read_gpus({})  # a probe that read no GPU

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "health"
BOOT = 1_800_000_000.0


def log(tmp_path: Path, lines: list[str] | None = None) -> dict[str, Any]:
    """The reader's answer for the stand-in log (or for ``lines``), dated from BOOT."""
    path = tmp_path / "kmsg"
    if lines is None:
        shutil.copy(HEALTH / "kmsg-sxid.txt", path)
    else:
        path.write_text("".join(f"4,{i},{100_000_000 * (i + 1)},-;{ln}\n"
                                for i, ln in enumerate(lines)))
    return {**node_health.kernel_log(str(path)), "boot_time": BOOT}


def test_one_read_of_the_log_serves_xid_and_sxid(tmp_path: Path) -> None:
    read = log(tmp_path)
    assert read["error"] is None and len(read["records"]) == 5  # 4 SXid + 1 Xid
    events = sxid.parse(read["records"], BOOT)
    assert [(e.switch, e.sxid, e.severity) for e in events] == [
        ("nvswitch3", 12028, "Non-fatal"), ("nvswitch2", 10002, ""),
        ("nvswitch1", 20034, "Correctable"), ("nvswitch0", 20034, "Fatal")]
    assert events[3].pci == "0000:c2:00.0" and events[3].detail == "Link 28 LTSSM Fault Up"
    assert events[3].when == BOOT + 1500
    # gpu.xid counts the Xid only, not the SXids
    assert [e.xid for e in xid.parse(read["records"], BOOT)] == [74]


def test_one_step_turns_a_record_into_message_and_time() -> None:
    """xid.message_of dates a /dev/kmsg record (``PRI,SEQ,USEC,FLAGS;MESSAGE``) from its
    USEC since boot; a line not in that format, or an unknown boot time, gives no time."""
    rec = "4,7,1500000000,-;nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28"
    assert xid.message_of(rec, BOOT) == (rec.split(";", 1)[1], BOOT + 1500)
    assert xid.message_of(rec, None) == (rec.split(";", 1)[1], None)
    plain = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    assert xid.message_of(plain, BOOT) == (plain, None)
    # both readers take each record's time from it: the same record, the same time
    xid_rec = "4,8,1600000000,-;" + plain
    assert [e.when for e in sxid.parse([rec], BOOT)] == [BOOT + 1500]
    assert [e.when for e in xid.parse([xid_rec], BOOT)] == [BOOT + 1600]


def test_a_fatal_sxid_fails_naming_switch_link_and_time(tmp_path: Path) -> None:
    r = sxid.judge(log(tmp_path), 4, None, "")
    assert r.status is Status.FAIL
    assert "nvswitch0 (0000:c2:00.0): SXid 20034 Fatal, Link 28 LTSSM Fault Up" in r.message
    assert r.measured == ("1 Fatal, 1 Non-fatal, 1 Correctable, 1 no severity SXid(s) "
                          "since boot")
    assert "DCGM" in r.source and "kmsg" in r.source


def test_the_window_starts_where_gpu_xid_counts_from(tmp_path: Path) -> None:
    # after the non-fatal ones, before the fatal one: still fails
    assert sxid.judge(log(tmp_path), 4, BOOT + 1000, "the check of X").status is Status.FAIL
    # after every SXid: passes, naming the check it counts from
    r = sxid.judge(log(tmp_path), 4, BOOT + 2000, "the check of X")
    assert r.status is Status.PASS and r.measured == "no SXid since the check of X (4 NVSwitch(es))"


def test_non_fatal_and_unnamed_severities_warn_correctable_passes(tmp_path: Path) -> None:
    line = "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, {}, Link 32 egress error"
    warn = sxid.judge(log(tmp_path, [line.format("Non-fatal")]), 4, None, "")
    assert warn.status is Status.WARN and "SXid 12028 Non-fatal, Link 32" in warn.message
    odd = sxid.judge(log(tmp_path, ["nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, "
                                    "Severity 5 Engine instance 00"]), 4, None, "")
    assert odd.status is Status.WARN and "severity not given" in odd.message
    ok = sxid.judge(log(tmp_path, [line.format("Correctable")]), 4, None, "")
    assert ok.status is Status.PASS and "1 Correctable" in ok.measured


def test_no_nvswitch_or_no_log_skips_with_the_reason(tmp_path: Path) -> None:
    quiet = log(tmp_path, ["Linux version 6.8.0"])
    r = sxid.judge(quiet, 0, None, "")
    assert r.status is Status.SKIP and "no NVSwitch on the PCI bus" in r.message
    # the 2x H200 machine: no NVSwitch, no SXid
    missing = node_health.kernel_log(str(tmp_path / "none"))
    r = sxid.judge(missing, 4, None, "")
    assert r.status is Status.SKIP and "kernel log unreadable" in r.message
    # SXids in the log are judged even where no switch was found on the bus
    assert sxid.judge(log(tmp_path), 0, None, "").status is Status.FAIL


def test_the_health_reader_and_judge_give_gpu_sxid(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    shutil.copy(HEALTH / "kmsg-sxid.txt", path)
    request = {"kernel_log": str(path), "rdma_sysfs": str(tmp_path / "ib"),
               "pci_sysfs": str(tmp_path / "pci"), "timeout": 5}
    proc = subprocess.run([sys.executable, "-S", "-c", health.source(), json.dumps(request)],
                          capture_output=True, text=True, check=True, timeout=60)
    doc = json.loads(proc.stdout)
    doc["fabric_manager"]["nvswitches"] = 4  # this machine's bus has none
    inp = node_inputs.inputs(Host("n1", ("g",), {}))
    results, _ = health.judge(doc, {}, NO_GPUS, 0, inp, None, health.Previous())
    by = {r.name: r for r in results}
    assert by["gpu.sxid"].status is Status.FAIL
    assert by["gpu.xid"].status is Status.FAIL  # Xid 74, counted apart
