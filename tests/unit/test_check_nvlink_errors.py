"""gpu.nvlink_errors: the real `nvidia-smi nvlink -e` of a 2x H200 machine
(tests/fixtures/check/h200-x2), each rising variant derived from it in code; the probe's
read of it through a stand-in nvidia-smi (the hardware's edge); the baseline kept in the
run history and in the node-local state."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import health, node_probe, nvlink_errors
from nodetune.check import local_state as ls
from nodetune.check.model import Status
from nodetune.errors import InputError
from nodetune.measure import node_inputs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x2"
REAL = (FIX / "nvidia-smi-nvlink-e.txt").read_text()
T0 = 1_800_000_000.0


def smi(text: str = REAL, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    """The probe's ``nvidia`` entry with ``nvidia-smi nvlink -e``'s answer."""
    return {"tool": "/usr/bin/nvidia-smi",
            "nvlink_errors": {"rc": rc, "stdout": text, "stderr": stderr}}


def with_count(text: str, gpu: int, link: int, counter: str, value: int) -> str:
    """``text`` with one counter of one link of one GPU set to ``value``."""
    head, _, rest = text.partition(f"GPU {gpu}:")
    block, nxt, tail = rest.partition("\nGPU ")
    block, n = re.subn(rf"(Link {link}: {counter} Errors: )\d+", rf"\g<1>{value}", block)
    assert n == 1
    return head + f"GPU {gpu}:" + block + nxt + tail


def by_name(results: list[Any]) -> dict[str, Any]:
    return {r.name: r for r in results}


def test_the_real_output_parses_per_gpu_and_link() -> None:
    gpus = nvlink_errors.parse(REAL)
    assert sorted(gpus) == [0, 1]
    assert sorted(gpus[1]) == list(range(18))
    assert gpus[0][17] == {"replay": 0, "recovery": 0, "crc": 0}
    kept = nvlink_errors.counters_of(smi())
    assert kept is not None and len(kept) == 36 and kept["1/17"]["crc"] == 0
    # an older nvidia-smi's CRC FLIT/Data lines, and N/A, as their own counters / left out
    old = "GPU 0: A100\n\t Link 0: CRC FLIT Errors: 4\n\t Link 0: CRC Data Errors: N/A\n"
    assert nvlink_errors.parse(old) == {0: {0: {"crc_flit": 4}}}


def test_the_first_check_passes_and_records_the_baseline() -> None:
    results = nvlink_errors.judge(smi(), None, None, "", T0)
    assert [r.name for r in results] == ["gpu.nvlink_errors[0]", "gpu.nvlink_errors[1]"]
    assert all(r.status is Status.PASS for r in results), results
    assert "no previous check" in results[0].measured
    assert "100/s" in results[0].expected and "DCGM" in results[0].source
    # replay errors with nothing to date them warn
    r = nvlink_errors.judge(smi(with_count(REAL, 0, 3, "Replay", 2)), None, None, "", T0)[0]
    assert r.status is Status.WARN and "link 3 replay 2" in r.message


def test_a_replay_or_recovery_error_since_the_previous_check_fails_that_gpu() -> None:
    before = nvlink_errors.counters_of(smi())
    now = with_count(with_count(REAL, 1, 5, "Replay", 3), 1, 6, "Recovery", 1)
    results = by_name(nvlink_errors.judge(smi(now), before, T0, "the check of X", T0 + 600))
    assert results["gpu.nvlink_errors[0]"].status is Status.PASS
    r = results["gpu.nvlink_errors[1]"]
    assert r.status is Status.FAIL
    assert "link 5 replay +3" in r.message and "link 6 recovery +1" in r.message
    assert "since the check of X" in r.message


def test_crc_errors_warn_below_the_rate_and_fail_at_it() -> None:
    before = nvlink_errors.counters_of(smi())
    few = nvlink_errors.judge(smi(with_count(REAL, 0, 2, "CRC", 10)), before, T0, "p",
                              T0 + 600)[0]
    assert few.status is Status.WARN and "link 2 CRC +10 in 600 s" in few.message
    many = nvlink_errors.judge(smi(with_count(REAL, 0, 2, "CRC", 6000)), before, T0, "p",
                               T0 + 60)[0]
    assert many.status is Status.FAIL and "100.0/s >= 100/s" in many.message
    # the inventory's limit
    low = nvlink_errors.judge(smi(with_count(REAL, 0, 2, "CRC", 600)), before, T0, "p",
                              T0 + 60, crc_per_s=5)[0]
    assert low.status is Status.FAIL and ">= 5/s" in low.message


def test_counters_that_went_down_restarted_and_are_no_negative_rate() -> None:
    high = with_count(with_count(REAL, 0, 0, "CRC", 50), 0, 0, "Replay", 5)
    before = nvlink_errors.counters_of(smi(high))
    # after a reboot: all zero again; not a failure, not a negative rise
    r = nvlink_errors.judge(smi(), before, T0, "p", T0 + 600)[0]
    assert r.status is Status.PASS and "-" not in r.measured.replace("since p: ", "")
    # after a reboot, 2 new CRC errors: counted whole
    r = nvlink_errors.judge(smi(with_count(REAL, 0, 0, "CRC", 2)), before, T0, "p", T0 + 600)[0]
    assert r.status is Status.WARN
    assert "link 0 crc +2 (counters restarted)" in r.measured


@pytest.mark.parametrize(("nvidia", "why"), [
    ({"tool": None}, "no nvidia-smi on the node"),
    ({"tool": "/usr/bin/nvidia-smi"}, "neither NVML nor nvidia-smi -q -x gave GPU data"),
    (smi("", rc=3, stderr="Failed to initialize NVML"),
     "nvidia-smi nvlink -e failed (exit 3: Failed to initialize NVML)"),
    # the 1x H200 machine: nvidia-smi nvlink -e prints nothing, exit 0
    (smi(""), "no NVLink on these GPUs"),
])
def test_no_counters_skips_with_the_reason(nvidia: dict[str, Any], why: str) -> None:
    results = nvlink_errors.judge(nvidia, None, None, "", T0)
    assert len(results) == 1 and results[0].status is Status.SKIP
    assert why in results[0].message
    assert nvlink_errors.counters_of(nvidia) is None or why.startswith("no NVLink")


def test_the_probe_runs_nvlink_s_e_beside_the_query(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stand_in = bin_ / "nvidia-smi"  # stand-in for the tool at the hardware's edge
    stand_in.write_text("#!/bin/sh\n"
                        f'case "$*" in "-q -x") echo "<log><gpu id=\\"0\\"/></log>";; '
                        f'"nvlink -s -e") cat {FIX}/nvidia-smi-nvlink-s-e.txt;; esac\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setattr(node_probe, "fact", lambda: {"pci_devices": lambda: [],
                                                     "nvidia_gpus": lambda devices: []})
    out = node_probe.nvidia(10.0)
    assert out["nvlink_errors"]["rc"] == 0
    assert nvlink_errors.counters_of(out) == nvlink_errors.counters_of(smi())
    # one run of the tool carries the link state too
    assert out["nvlink"] is out["nvlink_errors"]


def test_the_baseline_travels_through_history_and_local_state(tmp_path: Path) -> None:
    kept = nvlink_errors.counters_of(smi(with_count(REAL, 0, 1, "CRC", 7)))
    records = [{"started": "S", "run_id": "R",
                "health": {"n1": {"time": T0, "xid": "pass", "nvlink_errors": kept}}}]
    prev = health.previous("n1", records).of(nvlink_errors.NAME)
    assert prev.state == {"nvlink_errors": kept} and prev.time == T0 and "(R)" in prev.what
    again = health.previous_from(health.previous_doc(health.previous("n1", records)),
                                 source="f").of(nvlink_errors.NAME)
    assert (again.state, again.time) == ({"nvlink_errors": kept}, T0)
    ls.save(tmp_path, "n1", "boot", ls.State(), {"time": T0, "xid": "pass",
                                                 "nvlink_errors": kept}, out_of_service=False)
    local = ls.previous(ls.load(tmp_path, "n1", "boot")).of(nvlink_errors.NAME)
    assert local.state == {"nvlink_errors": kept} and local.time == T0
    # and the next check counts from it: 7 -> 9 is +2, not 9
    r = nvlink_errors.judge(smi(with_count(REAL, 0, 1, "CRC", 9)),
                            nvlink_errors.previous_counters(local.state["nvlink_errors"]),
                            local.time, local.what, T0 + 300)[0]
    assert r.status is Status.WARN and "link 1 CRC +2" in r.message


def test_the_limit_variable_is_checked_before_any_node() -> None:
    host = Host("gpu-1", ("g",), {})
    assert node_inputs.inputs(host).nvlink_crc_per_s == 100.0
    assert node_inputs.inputs(Host("gpu-1", ("g",), {
        node_inputs.VAR_NVLINK_CRC: "2.5"})).nvlink_crc_per_s == 2.5
    for bad in (0, -1, "many", True, "1; reboot"):
        with pytest.raises(InputError, match="nodetune_nvlink_crc_errors_per_s") as exc:
            node_inputs.inputs(Host("gpu-1", ("g",), {node_inputs.VAR_NVLINK_CRC: bad}))
        assert exc.value.host == "gpu-1"


def test_a_hung_nvlink_e_is_unknown_not_a_skip(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in nvidia-smi whose ``nvlink -e`` never answers: the probe's timeout ends it
    and gpu.nvlink_errors is unknown, with the reason."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stand_in = bin_ / "nvidia-smi"
    stand_in.write_text("#!/bin/sh\n"
                        'case "$*" in "-q -x") echo "<log><gpu id=\\"0\\"/></log>";; '
                        '"nvlink -s -e") sleep 60;; esac\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setattr(node_probe, "fact", lambda: {"pci_devices": lambda: [],
                                                     "nvidia_gpus": lambda devices: []})
    out = node_probe.nvidia(2.0)
    assert out["nvlink_errors"]["unknown"]
    (r,) = nvlink_errors.judge(out, None, None, "", T0)
    assert r.status is Status.UNKNOWN and r.message.startswith("nvidia-smi nvlink -e: ")
