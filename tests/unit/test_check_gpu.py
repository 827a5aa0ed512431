"""GPU checks on real `nvidia-smi -q -x` / `nvlink -s` output from 4x H200, and a failing
variant of each check derived from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import gpu, gpu_read, nvidia_smi
from nodetune.check.expect import expectations
from nodetune.check.model import Status
from nodetune.check.probe_parse import Probe

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x4"
XML = (FIX / "nvidia-smi-q-x.xml").read_text()
NVLINK = (FIX / "nvidia-smi-nvlink-s.txt").read_text()


def exp(**vars_: object):  # type: ignore[no-untyped-def]
    return expectations(Host("gpu-1", ("gpu_nodes",), dict(vars_)))


def second_gpu(xml: str, old: str, new: str) -> str:
    """Replace ``old`` with ``new`` inside the second <gpu> element only."""
    parts = xml.split("<gpu id=")
    assert old in parts[2], old
    parts[2] = parts[2].replace(old, new, 1)
    return "<gpu id=".join(parts)


def test_parses_the_real_capture() -> None:
    smi = nvidia_smi.parse_smi_xml(XML)
    assert smi.driver_version == "580.159.04"
    assert smi.cuda_version == "13.0"
    assert len(smi.gpus) == 4
    g = smi.gpus[1]
    assert g.bus_id == "00000000:00:07.0" and g.product == "NVIDIA H200"
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.persistence == "Enabled" and g.ecc_mode == "Enabled"
    assert g.sram_unc_volatile == 0 and g.dram_unc_aggregate == 0 and g.remapped_unc == 0
    assert not g.remap_pending and not g.remap_failure
    assert g.active_reasons == ("gpu_idle",)
    links = nvidia_smi.parse_nvlink(NVLINK)
    assert sorted(links) == [0, 1, 2, 3]
    assert all(len(per) == 18 and set(per.values()) == {"26.562 GB/s"} for per in links.values())


def test_every_check_passes_on_the_healthy_machine() -> None:
    smi = nvidia_smi.parse_smi_xml(XML)
    e = exp(nodetune_expected_gpus=4, nvidia_driver_version="580.159.04-1")
    results = [gpu.judge_count(smi, 4, e), gpu.judge_driver(smi, e),
               gpu.judge_persistence(smi, e), gpu.judge_ecc(smi), gpu.judge_pcie(smi),
               gpu.judge_clocks(smi), gpu.judge_nvlink(smi, nvidia_smi.parse_nvlink(NVLINK))]
    assert [r.status for r in results] == [Status.PASS] * 7, results
    assert results[0].source == "nodetune_expected_gpus"
    assert results[1].expected == "580.159.04"
    assert results[3].source.startswith("Azure NHC")


def test_count_fails_when_more_gpus_are_expected() -> None:
    r = gpu.judge_count(nvidia_smi.parse_smi_xml(XML), 4, exp(nodetune_expected_gpus=8))
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("4", "8")
    assert "4 GPU(s) visible to the driver, 8 expected" in r.message


def test_count_fails_when_the_bus_has_more_than_the_driver_sees() -> None:
    r = gpu.judge_count(nvidia_smi.parse_smi_xml(XML), 5, exp())
    assert r.status is Status.FAIL and "5 NVIDIA GPU(s) on the PCI bus" in r.message


def test_driver_pinned_in_the_inventory_fails_on_another_version() -> None:
    smi = nvidia_smi.parse_smi_xml(XML)
    r = gpu.judge_driver(smi, exp(nvidia_driver_version="550.127.08-1"))
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("580.159.04", "550.127.08")
    assert r.source == "nvidia_driver_version (inventory)"
    # Only the role's default pin: the inventory never said which driver, so a node on
    # another driver warns.
    older = nvidia_smi.parse_smi_xml(XML.replace("<driver_version>580.159.04<", "<driver_version>575.57.08<"))
    d = gpu.judge_driver(older, exp())
    assert d.status is Status.WARN and d.source == "nvidia_driver_version (role default)"


def test_the_role_default_is_the_driver_the_lent_machines_run() -> None:
    """R580 with the open module, as the H200 machine runs it: the default pin passes."""
    r = gpu.judge_driver(nvidia_smi.parse_smi_xml(XML), exp(), flavour="open")
    assert r.status is Status.PASS, r
    assert (r.measured, r.expected, r.message) == ("580.159.04 open", "580.159.04",
                                                   "open kernel module")


def test_a_loaded_module_of_the_other_flavour_fails_when_the_inventory_asks() -> None:
    smi = nvidia_smi.parse_smi_xml(XML)
    r = gpu.judge_driver(smi, exp(nvidia_driver_version="580.159.04-1",
                                  nvidia_driver_kernel_modules="proprietary"), flavour="open")
    assert r.status is Status.FAIL
    assert (r.measured, r.expected) == ("580.159.04 open", "580.159.04 proprietary")
    assert "nvidia_driver_kernel_modules (inventory)" in r.source


def test_module_flavour_from_the_proc_line() -> None:
    line = (Path(__file__).parent.parent / "fixtures" / "driver" /
            "proc-driver-nvidia-version-h100-x1.txt").read_text().splitlines()[0]
    assert gpu.module_flavour(line) == "open"
    assert gpu.module_flavour("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.08") == \
        "proprietary"
    assert gpu.module_flavour(None) is None


def test_persistence_off_fails() -> None:
    smi = nvidia_smi.parse_smi_xml(second_gpu(XML, "<persistence_mode>Enabled",
                                       "<persistence_mode>Disabled"))
    r = gpu.judge_persistence(smi, exp())
    assert r.status is Status.FAIL and "GPU 1 (00000000:00:07.0)" in r.message
    assert r.measured == "3/4 Enabled"


@pytest.mark.parametrize(("old", "new", "words"), [
    ("<remapped_row_pending>No", "<remapped_row_pending>Yes", "row remap pending"),
    ("<remapped_row_failure>No", "<remapped_row_failure>Yes", "row remap failure"),
    ("<remapped_row_unc>0", "<remapped_row_unc>513", "513 uncorrectable remapped rows > 512"),
    ("<sram_uncorrectable_secded>0", "<sram_uncorrectable_secded>2", "2 SRAM uncorrectable"),
    ("<sram_correctable>0", "<sram_correctable>10001", "10001 SRAM correctable errors"),
    ("<dram_correctable>0", "<dram_correctable>20000001", "DRAM ECC errors > 20000000"),
])
def test_ecc_fails_at_azure_nhc_limits(old: str, new: str, words: str) -> None:
    r = gpu.judge_ecc(nvidia_smi.parse_smi_xml(second_gpu(XML, old, new)))
    assert r.status is Status.FAIL, r
    assert words in r.message and "GPU 1" in r.message


def test_ecc_below_the_limits_passes_and_dram_uncorrectable_warns() -> None:
    at_limit = second_gpu(XML, "<sram_correctable>0", "<sram_correctable>10000")
    assert gpu.judge_ecc(nvidia_smi.parse_smi_xml(at_limit)).status is Status.PASS
    dram = second_gpu(XML, "<dram_uncorrectable>0", "<dram_uncorrectable>1")
    r = gpu.judge_ecc(nvidia_smi.parse_smi_xml(dram))
    assert r.status is Status.WARN and "row remapping" in r.message


def test_pcie_trained_at_x8_fails() -> None:
    xml = second_gpu(XML, "<current_link_width>16x", "<current_link_width>8x")
    r = gpu.judge_pcie(nvidia_smi.parse_smi_xml(xml))
    assert r.status is Status.FAIL
    assert "GPU 1 (00000000:00:07.0): x8, max x16" in r.message


def test_pcie_gen_down_fails_in_p0_and_warns_when_idle_in_p8() -> None:
    xml = second_gpu(XML, "<current_link_gen>5", "<current_link_gen>3")
    assert gpu.judge_pcie(nvidia_smi.parse_smi_xml(xml)).status is Status.FAIL
    idle = second_gpu(xml, "<performance_state>P0", "<performance_state>P8")
    r = gpu.judge_pcie(nvidia_smi.parse_smi_xml(idle))
    assert r.status is Status.WARN and "gen 3, max gen 5 in P8" in r.message


def test_hw_slowdown_fails_and_sw_thermal_warns() -> None:
    hw = second_gpu(XML, "<clocks_event_reason_hw_thermal_slowdown>Not Active",
                    "<clocks_event_reason_hw_thermal_slowdown>Active")
    r = gpu.judge_clocks(nvidia_smi.parse_smi_xml(hw))
    assert r.status is Status.FAIL and "GPU 1 (00000000:00:07.0): hw_thermal_slowdown" in r.message
    assert r.message.endswith("(active when read: one reading, not its share of a sampling window)")
    sw = second_gpu(XML, "<clocks_event_reason_sw_thermal_slowdown>Not Active",
                    "<clocks_event_reason_sw_thermal_slowdown>Active")
    assert gpu.judge_clocks(nvidia_smi.parse_smi_xml(sw)).status is Status.WARN


def test_older_drivers_throttle_reason_names_are_read() -> None:
    old = re.sub(r"clocks_event_reason", "clocks_throttle_reason", XML)
    old = second_gpu(old, "<clocks_throttle_reason_hw_slowdown>Not Active",
                     "<clocks_throttle_reason_hw_slowdown>Active")
    assert gpu.judge_clocks(nvidia_smi.parse_smi_xml(old)).status is Status.FAIL


def test_an_inactive_nvlink_fails() -> None:
    lines = NVLINK.splitlines()
    gpu2 = lines.index(next(ln for ln in lines if ln.startswith("GPU 2:")))
    lines[gpu2 + 6] = "\t Link 5: <inactive>"
    r = gpu.judge_nvlink(nvidia_smi.parse_smi_xml(XML), nvidia_smi.parse_nvlink("\n".join(lines)))
    assert r.status is Status.FAIL
    assert "GPU 2 link 5" in r.message
    assert "GPU 2: 17" in r.measured


def test_no_nvlink_skips() -> None:
    text = "\n".join(ln for ln in NVLINK.splitlines() if "Link" not in ln)
    r = gpu.judge_nvlink(nvidia_smi.parse_smi_xml(XML), nvidia_smi.parse_nvlink(text))
    assert r.status is Status.SKIP


def test_garbage_is_not_an_smi_log() -> None:
    with pytest.raises(ValueError, match="not XML"):
        nvidia_smi.parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate")
    with pytest.raises(ValueError, match="nvidia_smi_log"):
        nvidia_smi.parse_smi_xml("<html/>")


def test_package_version_to_driver_version() -> None:
    assert gpu.upstream_version("550.127.08-1") == "550.127.08"
    assert gpu.upstream_version("1:580.159.04-0ubuntu1") == "580.159.04"
    assert gpu.upstream_version("580.159.04") == "580.159.04"


def test_state_and_counters_in_one_run_are_each_read_by_their_own_parser() -> None:
    """`nvidia-smi nvlink -s -e` (what the probe runs), real output from 2x H200."""
    from nodetune.check import nvlink_errors
    text = (FIX.parent / "h200-x2" / "nvidia-smi-nvlink-s-e.txt").read_text()
    states = nvidia_smi.parse_nvlink(text)
    assert sorted(states) == [0, 1]
    assert all(len(links) == 18 and set(links.values()) == {"26.562 GB/s"}
               for links in states.values())
    counters = nvlink_errors.parse(text)
    assert counters[1][17] == {"replay": 0, "recovery": 0, "crc": 0}
    # One inactive link among the counters is still found.
    broken = text.replace("\t Link 5: 26.562 GB/s", "\t Link 5: <inactive>", 1)
    assert nvidia_smi.parse_nvlink(broken)[0][5] == "<inactive>"
    # a counter line of another shape does not replace (or hide) a link's state
    other = broken.replace("\t Link 5: Replay Errors: 0", "\t Link 5: Effective BER: 0", 1)
    assert nvidia_smi.parse_nvlink(other)[0][5] == "<inactive>"


def test_the_nvlink_states_are_read_with_the_gpus() -> None:
    """The probe's ``nvidia-smi nvlink -s -e`` answer is parsed where the rest of its
    nvidia section is (gpu_read), and gpu.nvlink judges that value."""
    nvidia = {"pci_gpus": 4, "tool": "/usr/bin/nvidia-smi", "nvml": {"rc": 3, "stdout": "{}"},
              "query": {"rc": 0, "stdout": XML}, "nvlink": {"rc": 0, "stdout": NVLINK}}
    assert gpu_read.read(nvidia).nvlink == nvidia_smi.parse_nvlink(NVLINK)
    hung = {**nvidia, "nvlink": {"rc": None, "unknown": "nvidia-smi gave no answer"}}
    assert gpu_read.nvlink_states(hung) == "nvidia-smi gave no answer"
    assert gpu_read.nvlink_states({**nvidia, "nvlink": {"rc": 1, "stdout": NVLINK}}) is None
    assert gpu_read.nvlink_states({}) is None
    no_data = {**nvidia, "query": {"rc": 1, "stdout": ""}}
    assert gpu_read.read(no_data).nvlink is None

    def nvlink_check(section: dict[str, object]) -> Status:
        probe = Probe("gpu-1", "gpu-1", "python3", nvidia=section)
        got = {r.name: r for r in gpu.judge_probe(probe, exp(), gpu_read.read(section))}
        return got["gpu.nvlink"].status

    assert nvlink_check(nvidia) is Status.PASS
    assert nvlink_check(hung) is Status.UNKNOWN
