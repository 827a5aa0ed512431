"""``fleet.versions``: the nodes of one check run against each other (kernel, driver,
VBIOS, torch, NCCL, HCA firmware, OFED/DOCA). The values come from real captures
(tests/fixtures/check/h200-x4: nvidia-smi -q -x on 4x H200; torch 2.11.0+cu130 as it
printed there); a node's other value is that capture with one field changed, said where."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import local, nvidia_smi, versions
from nodetune.check.model import NodeChecks, Status, passed
from nodetune.check.probe import Probe, parse
from nodetune.check.run import report_sections
from nodetune.errors import InputError
from tests.conftest import run_nodetune
from tests.unit.test_check_probe import FIX, TORCH_2_11
from tests.unit.test_cli_check import LOCAL, inventory, record

SMI = nvidia_smi.parse_smi_xml((FIX / "nvidia-smi-q-x.xml").read_text())


def probe(host: str, **changed: Any) -> Probe:
    """A node as the 4x H200 capture reported it, with two ConnectX-7 HCAs."""
    base = Probe(host=host, hostname=host, python="3.11.2", torch=dict(TORCH_2_11),
                 kernel="6.1.0-41-amd64", ofed="OFED-internal-25.10-1.7.1",
                 hca_firmware={"mlx5_0": "28.43.2026", "mlx5_1": "28.43.2026"})
    return dataclasses.replace(base, **changed)


def checked(node: str, found: dict[str, str], firmware: dict[str, str] | None = None
            ) -> NodeChecks:
    """A node's checks with what it runs (``found``) and its HCAs' firmware by device."""
    return NodeChecks(node, (passed("gpu.count", "4", "4", "x"),), versions=found,
                      hca_firmware=dict(firmware or {}))


FIRMWARE = probe("a").hca_firmware  # the two ConnectX-7s' firmware, by device


def test_a_node_reports_what_it_runs_from_the_real_capture() -> None:
    found = versions.of(probe("a"), SMI)
    assert found == {"kernel": "6.1.0-41-amd64", "driver": SMI.driver_version,
                     "cuda": SMI.cuda_version, "vbios": "96.00.A5.00.1A",
                     "torch": "2.11.0+cu130", "torch_cuda": "13.0", "nccl": "2.28.9",
                     "hca_firmware": "28.43.2026", "ofed": "OFED-internal-25.10-1.7.1"}
    assert versions.of(Probe(host="cpu", hostname="cpu", python="3"), None) == {}


def test_the_odd_node_out_warns_naming_the_majoritys_value() -> None:
    same = versions.of(probe("a"), SMI)
    # node d: the same capture, its NCCL one release behind
    results = {n: checked(n, same) for n in "abc"}
    results["d"] = checked("d", {**same, "nccl": "2.27.7"})
    out, section = versions.agree(results, {})
    d = out["d"].get(versions.NAME)
    assert d is not None and d.status is Status.WARN
    assert "NCCL 2.27.7, the others 2.28.9 (3 of 4 nodes)" in d.message
    for n in "abc":
        mine = out[n].get(versions.NAME)
        assert mine is not None and mine.status is Status.PASS, mine
    assert section["differ"] == {"d": ["nccl"]}
    assert section["versions"]["nccl"]["majority"] == "2.28.9"
    assert section["versions"]["nccl"]["nodes"]["d"] == "2.27.7"
    assert out["d"].verdict().reason.startswith("all checks passed (warnings: ")


def test_two_nodes_that_differ_have_no_majority_and_both_are_named() -> None:
    same = versions.of(probe("a"), SMI)
    out, section = versions.agree({"a": checked("a", same),
                                   "b": checked("b", {**same, "kernel": "6.12.48-1-amd64"})},
                                  {})
    for node, mine, theirs in (("a", "6.1.0-41-amd64", "6.12.48-1-amd64"),
                               ("b", "6.12.48-1-amd64", "6.1.0-41-amd64")):
        got = out[node].get(versions.NAME)
        assert got is not None and got.status is Status.WARN
        assert f"kernel {mine}, the others {theirs} (no majority)" in got.message
    assert section["versions"]["kernel"]["majority"] is None


def test_pinned_firmware_fails_a_node_even_where_the_majority_runs_it() -> None:
    same = versions.of(probe("a"), SMI)
    results = {n: checked(n, same, FIRMWARE) for n in "abc"}
    out, section = versions.agree(results, {"a": {"*": "28.43.2026"},
                                            "b": {"*": "28.44.1036"}})
    assert out["a"].get(versions.NAME).status is Status.PASS  # type: ignore[union-attr]
    b = out["b"].get(versions.NAME)
    assert b is not None and b.status is Status.FAIL
    assert b.message == ("HCA mlx5_0 firmware 28.43.2026, nodetune_expected_firmware pins "
                         "28.44.1036; HCA mlx5_1 firmware 28.43.2026, "
                         "nodetune_expected_firmware pins 28.44.1036")
    assert section["differ"] == {"b": ["hca_firmware"]}
    assert out["b"].verdict().state.value == "bad"


def test_gpus_of_one_node_on_different_vbios_warn() -> None:
    # the capture with its last GPU's VBIOS changed
    gpus = (*SMI.gpus[:-1], dataclasses.replace(SMI.gpus[-1], vbios="96.00.A5.00.1B"))
    mixed = versions.of(probe("b"), dataclasses.replace(SMI, gpus=gpus))
    assert mixed["vbios"] == "96.00.A5.00.1A, 96.00.A5.00.1B"
    same = versions.of(probe("a"), SMI)
    out, _ = versions.agree({"a": checked("a", same), "b": checked("b", mixed),
                             "c": checked("c", same)}, {})
    b = out["b"].get(versions.NAME)
    assert b is not None and b.status is Status.WARN
    assert "its own GPUs run different VBIOS versions" in b.message


def test_one_node_alone_gets_no_fleet_result() -> None:
    results = {"a": checked("a", versions.of(probe("a"), SMI)), "b": NodeChecks("b", error="x")}
    out, section = versions.agree(results, {})
    assert section == {} and out["a"].get(versions.NAME) is None


@pytest.mark.parametrize("value", [["28.43.2026"], {"mlx5_0": ""}, {"bad/name": "1"}, True,
                                   "28.43.2026, 28.44.1", {"mlx5_*": ["1"]}])
def test_a_firmware_pin_that_is_not_one_version_is_bad_input(value: object) -> None:
    with pytest.raises(InputError, match="nodetune_expected_firmware") as err:
        versions.pin(Host("gpu-3", ("gpu_nodes",), {"nodetune_expected_firmware": value}))
    assert err.value.host == "gpu-3"


def test_a_reported_version_that_is_not_a_plain_string_is_dropped() -> None:
    got = parse("a", {"probe": 1, "kernel": "6.1.0; rm -rf /", "ofed": 7,
                      "hca_firmware": {"mlx5_0": "28.43.2026", "../x": "1", "mlx5_1": "a b"}})
    assert (got.kernel, got.ofed, got.hca_firmware) == (None, None, {"mlx5_0": "28.43.2026"})


def test_versions_travel_in_the_node_local_report() -> None:
    """report.json's ``versions`` holds one value per thing a node runs and its
    ``hca_firmware`` each HCA's firmware by device; both come back whole."""
    mine = versions.of(probe("a"), SMI)
    doc = {"verb": "check", "host": "a",
           **report_sections({"a": checked("a", mine, FIRMWARE)})}
    assert doc["versions"] == {"a": mine} and set(mine) <= set(versions.LABELS)
    assert doc["hca_firmware"] == {"a": {"mlx5_0": "28.43.2026", "mlx5_1": "28.43.2026"}}
    back = local.from_report(doc, "a")
    assert (back.versions, back.hca_firmware) == (mine, FIRMWARE)
    # and the pin holds the controller's copy to each device's firmware
    out, _ = versions.agree({"a": back}, {"a": {"mlx5_1": "28.44.1036"}})
    a = out["a"].get(versions.NAME)
    assert a is not None and a.message == ("HCA mlx5_1 firmware 28.43.2026, "
                                           "nodetune_expected_firmware pins 28.44.1036")


def test_check_compares_two_real_probes_and_records_the_fleet(tmp_path: Path,
                                                               runs_dir: Path) -> None:
    """Two hosts of this machine (ansible_connection: local), each probe run for real
    under its own Python wrapper, which puts a stand-in ``ofed_info`` first on PATH (the
    hardware's edge: this machine has no OFED); their ofed_info versions differ."""
    hosts = {}
    for name, version in (("here", "OFED-internal-25.10-1.7.1"),
                          ("there", "OFED-internal-24.10-3.2.5")):
        bin_ = tmp_path / name
        bin_.mkdir()
        stand_in = bin_ / "ofed_info"
        stand_in.write_text(f"#!/bin/sh\necho '{version}:'\n")
        wrapper = bin_ / "python"
        wrapper.write_text(f'#!/bin/sh\nPATH={bin_}:$PATH exec {sys.executable} "$@"\n')
        for f in (stand_in, wrapper):
            os.chmod(f, 0o755)
        hosts[name] = {**LOCAL, "ansible_python_interpreter": str(wrapper)}
    res = run_nodetune("check", str(inventory(tmp_path, **hosts)), "--json",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    doc = record(runs_dir)
    fleet = doc["fleet"]
    assert fleet["nodes_compared"] == 2
    assert fleet["versions"]["ofed"]["nodes"] == {"here": "OFED-internal-25.10-1.7.1",
                                                  "there": "OFED-internal-24.10-3.2.5"}
    assert fleet["versions"]["kernel"]["majority"] == os.uname().release
    assert fleet["differ"] == {"here": ["ofed"], "there": ["ofed"]}
    here = next(c for c in doc["checks"]["here"] if c["name"] == versions.NAME)
    assert here["status"] == "warn"
    assert ("OFED/DOCA OFED-internal-25.10-1.7.1, the others OFED-internal-24.10-3.2.5 "
            "(no majority)") in here["message"]
    assert doc["versions"]["there"]["kernel"] == os.uname().release


def test_a_checks_own_action_travels_in_the_node_local_report() -> None:
    """gpu.ecc sets service itself where a row remap failed (its default is a GPU reset):
    the controller's copy of a node-local report keeps the check's own action."""
    from nodetune.action import Action
    from nodetune.check.model import failed

    ecc = failed("gpu.ecc", "remap failure", "none", "x", "y", action=Action.SERVICE)
    mine = NodeChecks("a", (ecc,))
    doc = {"verb": "check", "host": "a", **report_sections({"a": mine})}
    back = local.from_report(doc, "a")
    assert back.results[0].recommended is Action.SERVICE
    doc["checks"]["a"][0]["action"] = "polish"  # a newer version's rung: the default then
    assert local.from_report(doc, "a").results[0].recommended is Action.RESET_GPU


def test_a_pin_holds_a_node_checked_alone_and_a_node_without_hcas() -> None:
    alone = {"a": checked("a", versions.of(probe("a"), SMI), FIRMWARE)}
    out, section = versions.agree(alone, {"a": {"*": "28.44.1036"}})
    a = out["a"].get(versions.NAME)
    assert section == {} and a is not None and a.status is Status.FAIL
    bare = {"b": checked("b", versions.of(probe("b", hca_firmware={}), SMI))}
    out, _ = versions.agree(bare, {"b": {"*": "28.43.2026"}})
    b = out["b"].get(versions.NAME)
    assert b is not None and b.status is Status.FAIL
    assert "pins every HCA to 28.43.2026, but no such HCA reported its firmware" in b.message
    assert versions.agree(alone, {"a": None})[0]["a"].get(versions.NAME) is None


def test_a_mapping_pins_each_hca_model_its_own_firmware() -> None:
    """A compute CX-7 pair and a BlueField-3 (stand-in names and versions) on one node."""
    node = probe("a", hca_firmware={"mlx5_0": "28.43.2026", "mlx5_1": "28.43.2026",
                                    "mlx5_bf_0": "32.43.1014"})
    results = {"a": checked("a", versions.of(node, SMI), node.hca_firmware)}
    pins = versions.pin(Host("a", ("gpu_nodes",), {"nodetune_expected_firmware": {
        "mlx5_[0-9]": "28.43.2026", "mlx5_bf_*": "32.43.1014"}}))
    assert pins == {"mlx5_[0-9]": "28.43.2026", "mlx5_bf_*": "32.43.1014"}
    out, _ = versions.agree(results, {"a": pins})
    assert out["a"].get(versions.NAME).status is Status.PASS  # type: ignore[union-attr]
    out, _ = versions.agree(results, {"a": {"*": "28.43.2026"}})  # one version for all
    got = out["a"].get(versions.NAME)
    assert got is not None and got.status is Status.FAIL
    assert got.message == "HCA mlx5_bf_0 firmware 32.43.1014, nodetune_expected_firmware pins 28.43.2026"


def test_a_hung_ofed_info_is_not_assessed_not_agreed() -> None:
    same = versions.of(probe("a"), SMI)
    hung = versions.of(probe("b", ofed=None, ofed_unknown="timed out after 5 s"), SMI)
    assert "ofed" not in hung and hung[versions.UNREAD].startswith("ofed_info -s: timed out")
    out, _ = versions.agree({"a": checked("a", same), "b": checked("b", hung),
                             "c": checked("c", same)}, {})
    b = out["b"].get(versions.NAME)
    assert b is not None and b.status is Status.UNKNOWN
    assert b.message == "not assessed: ofed_info -s: timed out after 5 s"
