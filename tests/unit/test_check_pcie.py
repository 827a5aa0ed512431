"""fabric.pcie (the HCAs' PCIe links) and node.pcie_aer (AER counters since the previous
check), read by the real node reader from the stand-in sysfs trees of
tests/fixtures/check/health (their README names the kernel's formats), each with a failing
variant."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import hca_pcie, health, node_health, pcie_aer, signal_read
from nodetune.check.gpu_read import read as read_gpus
from nodetune.check.model import Status
from nodetune.errors import InputError
from nodetune.measure import node_inputs

NO_GPUS = read_gpus({})  # a probe that read no GPU

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "health"
HOUR = 3600.0


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the stand-in trees (their relative links kept): (RDMA class dir, PCI dir)."""
    for name in ("sysfs-infiniband", "sysfs-pci"):
        shutil.copytree(HEALTH / name, tmp_path / name, symlinks=True)
    return tmp_path / "sysfs-infiniband", tmp_path / "sysfs-pci" / "bus-pci-devices"


def _read(ib: Path, pci: Path) -> dict[str, Any]:
    return node_health.pcie(str(ib), str(pci))


def _set(pci: Path, addr: str, name: str, text: str) -> None:
    (pci / addr / name).resolve().write_text(text + "\n")


def _bump(pci: Path, addr: str, kind: str, by: int, name: str = "CmpltTO") -> None:
    """Add ``by`` errors of ``name`` to one AER file, as the kernel counts them."""
    path = (pci / addr / f"aer_dev_{kind}").resolve()
    lines = []
    for line in path.read_text().splitlines():
        key, count = line.rsplit(" ", 1)
        if key == name or key.startswith("TOTAL_ERR_"):
            count = str(int(count) + by)
        lines.append(f"{key} {count}")
    path.write_text("\n".join(lines) + "\n")


# --- the node reader ----------------------------------------------------------------------

def test_reader_finds_hca_links_and_the_aer_counters_of_gpus_hcas_and_their_bridges() -> None:
    doc = _read(HEALTH / "sysfs-infiniband", HEALTH / "sysfs-pci" / "bus-pci-devices")
    assert [(h["device"], h["pci"], h["vf"]) for h in doc["hcas"]] == [
        ("mlx5_0", "0000:18:00.0", False), ("mlx5_1", "0000:38:00.0", False)]
    assert doc["hcas"][0]["link"]["current_link_speed"] == "32.0 GT/s PCIe"
    roles = {f["pci"]: f["roles"] for f in doc["functions"]}
    assert roles == {"0000:17:01.0": ["bridge above 0000:18:00.0"],
                     "0000:18:00.0": ["HCA mlx5_0"],
                     "0000:37:01.0": ["bridge above 0000:38:00.0"],
                     "0000:38:00.0": ["HCA mlx5_1"],
                     "0000:9a:01.0": ["bridge above 0000:9b:00.0"],
                     "0000:9b:00.0": ["GPU"]}
    counts = pcie_aer.counters_of(doc)
    assert counts["0000:18:00.0"] == {"correctable": 2, "nonfatal": 0, "fatal": 0}
    assert counts["0000:17:01.0"]["correctable"] == 1


def test_reader_skips_names_that_are_not_plain(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    (ib / "bad name").mkdir()
    (ib / "bad name" / "device").symlink_to(ib / "mlx5_0" / "device")
    (pci / "not-an-address").mkdir()
    doc = _read(ib, pci)
    assert [h["device"] for h in doc["hcas"]] == ["mlx5_0", "mlx5_1"]
    assert "not-an-address" not in {f["pci"] for f in doc["functions"]}


def test_the_reader_script_as_the_controller_runs_it(tmp_path: Path) -> None:
    """``python -c SOURCE REQUEST``, then health.judge on its answer: both checks there."""
    ib, pci = _tree(tmp_path)
    log = tmp_path / "kmsg"
    log.write_text("6,1,1000,-;Linux version 6.8.0\n")
    request = {"kernel_log": str(log), "rdma_sysfs": str(ib), "pci_sysfs": str(pci),
               "timeout": 5}
    proc = subprocess.run([sys.executable, "-c", health.source(), json.dumps(request)],
                          capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(proc.stdout.splitlines()[-1])
    inp = node_inputs.inputs(Host("n1", (), {"nodetune_rdma_sysfs": str(ib),
                                             "nodetune_pci_sysfs": str(pci)}))
    results, state = health.judge(doc, {}, NO_GPUS, 2, inp, None, signal_read.Previous())
    by = {r.name: r for r in results}
    assert by["fabric.pcie[mlx5_0]"].status is Status.PASS
    assert by["node.pcie_aer"].status is Status.PASS
    assert "no previous check" in by["node.pcie_aer"].measured
    assert state["pcie_aer"]["0000:18:00.0"] == {"correctable": 2, "nonfatal": 0, "fatal": 0}


def test_one_check_parses_each_aer_file_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """health.judge reads the counters once for node.pcie_aer, the next check's counters and
    its correctable baseline (three parses of every file before), with the same outcome."""
    doc = {"pcie": _read(HEALTH / "sysfs-infiniband", HEALTH / "sysfs-pci" / "bus-pci-devices")}
    files = sum(1 for f in doc["pcie"]["functions"] for kind, _ in pcie_aer.KINDS
                if kind in (f.get("aer") or {}))
    assert files >= 12  # six functions, each with its three files
    parsed: list[object] = []
    real = pcie_aer.parse

    def counting(text: object) -> tuple[int | None, dict[str, int]]:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(pcie_aer, "parse", counting)
    inp = node_inputs.inputs(Host("n1", (), {}))
    kept = {"pcie_aer": pcie_aer.counters_of(doc["pcie"])}
    prev = signal_read.Previous(kept={pcie_aer.NAME: signal_read.Kept(kept, 0.0, "the check of t0")})
    parsed.clear()
    results, state = health.judge(doc, {}, NO_GPUS, 2, inp, None, prev)
    assert len(parsed) == files, len(parsed)
    aer = next(r for r in results if r.name == pcie_aer.NAME)
    assert aer.status is Status.PASS and "no new errors on 6 functions" in aer.measured, aer
    assert state["pcie_aer"] == kept["pcie_aer"]
    assert state["pcie_aer_window"]["correctable"]["0000:18:00.0"] == 2


# --- fabric.pcie --------------------------------------------------------------------------

def test_hca_links_at_their_maximum_pass() -> None:
    doc = _read(HEALTH / "sysfs-infiniband", HEALTH / "sysfs-pci" / "bus-pci-devices")
    results = hca_pcie.judge(doc, "/sys/class/infiniband", speed_fails=False)
    assert [(r.name, r.status) for r in results] == [
        ("fabric.pcie[mlx5_0]", Status.PASS), ("fabric.pcie[mlx5_1]", Status.PASS)]
    assert results[0].measured == "x16 32 GT/s" and results[0].expected == "x16 32 GT/s"


def test_a_narrower_hca_link_fails(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    _set(pci, "0000:38:00.0", "current_link_width", "8")
    by = {r.name: r for r in hca_pcie.judge(_read(ib, pci), str(ib), speed_fails=False)}
    assert by["fabric.pcie[mlx5_0]"].status is Status.PASS
    bad = by["fabric.pcie[mlx5_1]"]
    assert bad.status is Status.FAIL and bad.measured == "x8 32 GT/s"
    assert "mlx5_1 (0000:38:00.0): link trained at x8, below its x16" in bad.message


def test_a_lower_hca_speed_warns_unless_the_inventory_makes_it_fail(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    _set(pci, "0000:18:00.0", "current_link_speed", "2.5 GT/s PCIe")
    (w, _ok) = hca_pcie.judge(_read(ib, pci), str(ib), speed_fails=False)
    assert w.status is Status.WARN and w.measured == "x16 2.5 GT/s"
    assert "train down while idle" in w.message and "nodetune_hca_pcie_speed_fails" in w.message
    (f, _ok) = hca_pcie.judge(_read(ib, pci), str(ib), speed_fails=True)
    assert f.status is Status.FAIL and "nodetune_hca_pcie_speed_fails is true" in f.message
    # A kernel before 5.7 prints the speed without ".0" and "PCIe".
    _set(pci, "0000:18:00.0", "current_link_speed", "16 GT/s")
    _set(pci, "0000:18:00.0", "max_link_speed", "16 GT/s")
    (p, _ok) = hca_pcie.judge(_read(ib, pci), str(ib), speed_fails=True)
    assert p.status is Status.PASS and p.measured == "x16 16 GT/s"


def test_virtual_functions_and_links_without_attributes_skip(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    (pci / "0000:18:00.0").resolve().joinpath("physfn").mkdir()
    (pci / "0000:38:00.0").resolve().joinpath("max_link_width").unlink()
    vf, bare = hca_pcie.judge(_read(ib, pci), str(ib), speed_fails=False)
    assert vf.status is Status.SKIP and "virtual function" in vf.message
    assert bare.status is Status.SKIP and "no maximum link width/speed" in bare.message


def test_no_rdma_device_skips_with_the_reason(tmp_path: Path) -> None:
    (r,) = hca_pcie.judge(_read(tmp_path / "none", tmp_path / "none"), "/sys/class/infiniband",
                          speed_fails=False)
    assert r.name == "fabric.pcie" and r.status is Status.SKIP
    assert "no RDMA device with a PCI function (/sys/class/infiniband/DEV/device" in r.message


# --- node.pcie_aer ------------------------------------------------------------------------

def _aer(ib: Path, pci: Path, prev: dict[str, dict[str, int]] | None, hours: float = 1.0,
         per_hour: int = 60) -> Any:
    return pcie_aer.judge(_read(ib, pci), prev, 1000.0 if prev is not None else None,
                          "the check of T", 1000.0 + hours * HOUR, per_hour=per_hour)


def test_the_first_check_reports_totals_since_boot(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    r = _aer(ib, pci, None)
    assert r.status is Status.PASS and r.measured == (
        "correctable 3, nonfatal 0, fatal 0 since boot on 6 functions (no previous check)")
    _bump(pci, "0000:9b:00.0", "fatal", 1)
    w = _aer(ib, pci, None)
    assert w.status is Status.WARN and "no previous check to date them" in w.message
    assert "0000:9b:00.0 (GPU): fatal 1 [CmpltTO 1] since boot" in w.message


def test_no_new_errors_pass_and_a_new_fatal_or_nonfatal_fails(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    before = pcie_aer.counters_of(_read(ib, pci))
    assert _aer(ib, pci, before).status is Status.PASS
    _bump(pci, "0000:9b:00.0", "fatal", 1)
    f = _aer(ib, pci, before)
    assert f.status is Status.FAIL and "0000:9b:00.0 fatal +1" in f.measured
    assert "0000:9b:00.0 (GPU): fatal +1 [CmpltTO 1]" in f.message
    before = pcie_aer.counters_of(_read(ib, pci))
    assert _aer(ib, pci, before).status is Status.PASS  # counted once
    _bump(pci, "0000:17:01.0", "nonfatal", 2, name="SDES")
    n = _aer(ib, pci, before)
    assert n.status is Status.FAIL
    assert "0000:17:01.0 (bridge above 0000:18:00.0): nonfatal +2 [SDES 2]" in n.message


def test_correctable_errors_above_the_rate_warn(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    before = pcie_aer.counters_of(_read(ib, pci))
    _bump(pci, "0000:18:00.0", "correctable", 61, name="BadTLP")
    w = _aer(ib, pci, before)
    assert w.status is Status.WARN
    assert "0000:18:00.0 (HCA mlx5_0): correctable +61 [RxErr 2, BadTLP 61] in 1.0 h, over " \
        "60/h" in w.message
    assert _aer(ib, pci, before, hours=2).status is Status.PASS   # 61 in 2 h
    assert _aer(ib, pci, before, per_hour=100).status is Status.PASS
    # a window under an hour counts as an hour: 61 a minute after the previous check warns,
    # 30 does not
    assert _aer(ib, pci, before, hours=1 / 60).status is Status.WARN
    _bump(pci, "0000:18:00.0", "correctable", -31, name="BadTLP")
    assert _aer(ib, pci, before, hours=1 / 60).status is Status.PASS


def test_counters_that_went_down_restart_the_count(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    before = {"0000:9b:00.0": {"correctable": 50, "nonfatal": 0, "fatal": 4}}
    r = _aer(ib, pci, before)   # now: 0 and 0, below the previous 50 and 4: nothing new
    assert r.status is Status.PASS and "no new errors" in r.measured
    _bump(pci, "0000:9b:00.0", "fatal", 1)  # after the reset: 1, below 4, all of it new
    f = _aer(ib, pci, before)
    assert f.status is Status.FAIL and "0000:9b:00.0 fatal +1 (counters restarted)" in f.measured


def test_no_aer_files_skips_with_the_reason(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    for f in (tmp_path / "sysfs-pci" / "devices").rglob("aer_dev_*"):
        f.unlink()
    r = _aer(ib, pci, None)
    assert r.status is Status.SKIP and "no aer_dev_* counters on the 6 PCI functions" in r.message
    none = pcie_aer.judge(_read(tmp_path / "x", tmp_path / "x"), None, None, "", 0.0)
    assert none.status is Status.SKIP and "no GPU or RDMA device" in none.message


def test_the_previous_check_keeps_the_aer_counters_and_its_time() -> None:
    records = [
        {"run_id": "r1", "started": "t1", "health": {"n1": {
            "time": 100.0, "xid": "pass", "rdma_counters": {},
            "pcie_aer": {"0000:9b:00.0": {"fatal": 1, "bad": "x"}}}}},
        {"run_id": "r2", "started": "t2", "health": {"n1": {"time": 200.0, "xid": "pass",
                                                            "rdma_counters": {}}}},
    ]
    prev = health.previous("n1", records)
    aer = prev.of(pcie_aer.NAME)
    assert pcie_aer.previous_counters(aer.state["pcie_aer"]) == {"0000:9b:00.0": {"fatal": 1}}
    assert aer.time == 100.0 and "(r1)" in aer.what and "(r2)" in prev.of("fabric.rdma_errors").what
    again = health.previous_from(json.loads(json.dumps(health.previous_doc(prev))), source="f")
    assert again == prev


def test_inventory_variables_are_read_and_refused_when_not_usable() -> None:
    inp = node_inputs.inputs(Host("n1", (), {}))
    assert (inp.pci_sysfs, inp.hca_speed_fails, inp.aer_per_hour) == (
        "/sys/bus/pci/devices", False, 60)
    inp = node_inputs.inputs(Host("n1", (), {"nodetune_hca_pcie_speed_fails": "yes",
                                             "nodetune_pcie_aer_correctable_per_hour": "10"}))
    assert (inp.hca_speed_fails, inp.aer_per_hour) == (True, 10)
    for bad in ({"nodetune_pci_sysfs": "sys/bus"}, {"nodetune_hca_pcie_speed_fails": "maybe"},
                {"nodetune_pcie_aer_correctable_per_hour": -1},
                {"nodetune_pcie_aer_correctable_per_hour": True}):
        with pytest.raises(InputError, match=next(iter(bad))):
            node_inputs.inputs(Host("n1", (), bad))


def test_a_function_the_previous_check_did_not_see_is_judged_since_boot(tmp_path: Path) -> None:
    ib, pci = _tree(tmp_path)
    before = pcie_aer.counters_of(_read(ib, pci))
    gpu = before.pop("0000:9b:00.0")
    assert _aer(ib, pci, before).status is Status.PASS  # new, and clean since boot
    _bump(pci, "0000:9b:00.0", "nonfatal", 1, name="UnsupReq")
    w = _aer(ib, pci, before)
    assert w.status is Status.WARN and "not in the check of T, uncorrectable since boot: " \
        "0000:9b:00.0 (GPU): nonfatal 1 [UnsupReq 1] since boot" in w.message
    assert _aer(ib, pci, {**before, "0000:9b:00.0": gpu}).status is Status.FAIL


def _one(aer: dict[str, str], roles: object = ("GPU",)) -> dict[str, Any]:
    return {"functions": [{"pci": "0000:18:00.0", "roles": roles, "aer": aer}]}


def test_a_reset_counts_every_kind_whole() -> None:
    before = {"0000:18:00.0": {"correctable": 100, "nonfatal": 5, "fatal": 0}}
    now = _one({"correctable": "TOTAL_ERR_COR 200", "nonfatal": "TOTAL_ERR_NONFATAL 0",
                "fatal": "TOTAL_ERR_FATAL 0"})
    r = pcie_aer.judge(now, before, 0.0, "the check of t0", 3600.0, per_hour=1000)
    assert "correctable +200 (counters restarted)" in r.measured, r


@pytest.mark.parametrize("pcie", [
    {"functions": 5}, {"functions": [5, "x"]}, {"hcas": 7}, {"functions": None},
    _one({"correctable": "TOTAL_ERR_COR \u00b2", "fatal": "TOTAL_ERR_FATAL " + "9" * 5000}),
    _one({"correctable": "TOTAL_ERR_COR 1"}, roles=5),
])
def test_odd_reader_answers_are_not_read_rather_than_crash(pcie: dict[str, Any]) -> None:
    """What the node sends is untrusted: wrong types, a superscript digit, a count of 5,000
    digits (past Python's int limit) are left out, never a traceback."""
    aer = pcie_aer.judge(pcie, None, None, "", 0.0)
    assert aer.status in (Status.SKIP, Status.PASS), aer
    assert pcie_aer.counters_of(pcie) in ({}, {"0000:18:00.0": {"correctable": 1}})
    assert hca_pcie.judge(pcie, "/sys/class/infiniband", speed_fails=False)[0].status \
        is Status.SKIP


def test_an_unreadable_current_width_is_not_a_measured_fault() -> None:
    hca = {"device": "mlx5_0", "pci": "0000:1a:00.0", "link": {
        "current_link_width": "?", "max_link_width": "16",
        "current_link_speed": "32.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe"}}
    r = hca_pcie.judge_one(hca, speed_fails=True)
    assert r.status is Status.WARN and "could not be read" in r.message, r


def test_the_controller_keeps_only_plain_names_from_the_reader() -> None:
    pcie = {"hcas": [{"device": "mlx5_0", "link": {}}, {"device": "../etc", "link": {}}],
            "functions": [{"pci": "0000:18:00.0", "aer": {}},
                          {"pci": "0000:18:00.0\nX", "aer": {}}]}
    kept = health._trusted_pcie(pcie)
    assert [h["device"] for h in kept["hcas"]] == ["mlx5_0"]
    assert [f["pci"] for f in kept["functions"]] == ["0000:18:00.0"]


def test_a_rate_that_is_not_a_plain_number_is_bad_input() -> None:
    host = Host("gpu-1", ("gpu_nodes",), {"nodetune_pcie_aer_correctable_per_hour": "\u00b2"})
    with pytest.raises(InputError, match="nodetune_pcie_aer_correctable_per_hour"):
        node_inputs.inputs(host)


def test_checks_every_five_minutes_hold_correctable_errors_to_the_hourly_rate() -> None:
    """600 correctable errors an hour (50 every 5 minutes) against 60/h: checks 5 minutes
    apart each see 50, under an hour's 60, but the baseline is kept until it is an hour
    old, so the count since it passes 60 on the second check and warns."""
    def at(n: int) -> dict[str, Any]:
        return _one({"correctable": f"TOTAL_ERR_COR {n}", "nonfatal": "TOTAL_ERR_NONFATAL 0",
                     "fatal": "TOTAL_ERR_FATAL 0"})

    prev_counts, prev_time, window = None, None, None
    statuses = []
    for i in range(14):
        now, pcie = 1000.0 + 300 * i, at(50 * i)
        r = pcie_aer.judge(pcie, prev_counts, prev_time, "the previous check", now,
                           per_hour=60, window=window)
        statuses.append(r.status)
        prev_counts, prev_time = pcie_aer.counters_of(pcie), now
        window = pcie_aer.next_window(prev_counts, window, now)
    assert statuses[1] is Status.PASS and statuses[2] is Status.WARN, statuses
    assert Status.WARN in statuses[12:], statuses  # and again after the window restarted
    # A quiet node: 1 error every 5 minutes is 12 an hour, never over 60.
    prev_counts, prev_time, window = None, None, None
    for i in range(14):
        now, pcie = 1000.0 + 300 * i, at(i)
        r = pcie_aer.judge(pcie, prev_counts, prev_time, "p", now, per_hour=60, window=window)
        assert r.status is Status.PASS, (i, r)
        prev_counts, prev_time = pcie_aer.counters_of(pcie), now
        window = pcie_aer.next_window(prev_counts, window, now)


def test_the_correctable_baseline_is_kept_in_the_history_and_the_node_state(
        tmp_path: Path) -> None:
    from nodetune.check import local_state

    window = {"since": 100.0, "correctable": {"0000:18:00.0": 7}}
    records = [{"run_id": "r1", "started": "t1", "health": {"n1": {
        "time": 400.0, "xid": "pass", "rdma_counters": {},
        "pcie_aer": {"0000:18:00.0": {"correctable": 9}}, "pcie_aer_window": window}}}]
    prev = health.previous("n1", records)
    assert prev.of(pcie_aer.NAME).state["pcie_aer_window"] == window
    again = health.previous_from(health.previous_doc(prev), source="f")
    assert again.of(pcie_aer.NAME).state["pcie_aer_window"] == window
    local_state.save(tmp_path, "n1", "boot", local_state.State(),
                     {"time": 400.0, "xid": "pass", "pcie_aer": {}, "pcie_aer_window": window},
                     out_of_service=False)
    state = local_state.load(tmp_path, "n1", "boot")
    assert state.kept[pcie_aer.NAME]["pcie_aer_window"] == window
    assert local_state.previous(state).of(pcie_aer.NAME).state["pcie_aer_window"] == window
