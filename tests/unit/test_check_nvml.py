"""The GPUs read through NVML (check/node_nvml.py, check/nvml.py, check/gpu_read.py).

Faked at the hardware's edge only, and named so: :class:`StandInNvml` stands in for
``libnvidia-ml.so.1`` (this machine has no GPU and no driver). It answers NVML's calls by
their nvml.h names, argument order and return codes, from the values of a real ``nvidia-smi
-q -x`` capture (tests/fixtures/check), so that reading a capture's machine through NVML
must give exactly what its XML gives. On the GPU machines the same comparison runs against
the real library (benchmarks/nvml_vs_smi.py, docs/benchmarks.md).
"""

from __future__ import annotations

import ast
import ctypes
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import (
    gpu_read,
    health,
    node_nvml,
    nvidia_smi,
    nvml,
    probe,
    retired_pages,
    signal_read,
)
from nodetune.check.model import Status
from nodetune.measure import node_inputs
from tests.unit.test_check_probe import by_name, rig, run_probe

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check"
CAPTURES = ("h200-x4", "h100-x1")
# nvml.h's values, written out here rather than taken from node_nvml (NVML_API_VERSION 13)
REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
               "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
               "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
               "display_clocks_setting": 0x100}
LOCATIONS = {7: "sram", 2: "dram"}             # NVML_MEMORY_LOCATION_SRAM, _DRAM
STATES = {"N/A": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
FABRIC_V2 = 0x02000024                          # NVML_STRUCT_VERSION(GpuFabricInfo, 2)
SRAM_V1 = 0x01000068                            # NVML_STRUCT_VERSION(EccSramErrorStatus, 1)
ERRORS = {0: b"Success", 3: b"Not Supported", 4: b"Insufficient Permissions",
          15: b"GPU is lost", 25: b"Argument version mismatch", 999: b"Unknown Error"}


class StandInNvml:
    """A stand-in for libnvidia-ml.so.1: NVML's calls (nvml.h), answered from one
    ``nvidia-smi -q -x`` capture's values; ``codes`` makes a named call return that code."""

    def __init__(self, xml: str, *, cuda: int = 13000, codes: dict[str, int] | None = None,
                 throttle_only: bool = False) -> None:
        self.smi = nvidia_smi.parse_smi_xml(xml)
        self.fabric = nvidia_smi.fabric_states(xml)
        self.retired = retired_pages.parse(xml) or []
        self.sram = [{e.tag: int(e.text) for e in g.iter() if e.tag.startswith("sram_")
                      and (e.text or "").isdigit() and e.tag != "sram_threshold_exceeded"}
                     for g in ET.fromstring(xml).findall("gpu")]
        self.sram_split = [{k: {"volatile": None, "aggregate": None} for k in
                            ("sram_uncorrectable_parity", "sram_uncorrectable_secded")}
                           for _ in self.sram]
        for i, g in enumerate(ET.fromstring(xml).findall("gpu")):
            for counter in ("volatile", "aggregate"):
                for key in self.sram_split[i]:
                    text = g.findtext(f"ecc_errors/{counter}/{key}") or ""
                    self.sram_split[i][key][counter] = int(text) if text.isdigit() else None
        self.cuda, self.codes, self.shutdowns = cuda, codes or {}, 0
        if throttle_only:  # a library from before R535 has only the old name
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self.nvmlDeviceGetCurrentClocksEventReasons

    def __getattribute__(self, name: str) -> Any:
        if name == "nvmlDeviceGetCurrentClocksEventReasons" and \
                "nvmlDeviceGetCurrentClocksThrottleReasons" in object.__getattribute__(self, "__dict__"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _code(self, name: str) -> int | None:
        return self.codes.get(name)

    def _gpu(self, device: Any) -> Any:
        return self.smi.gpus[device.value - 1]

    def nvmlErrorString(self, code: int) -> bytes:
        return ERRORS.get(code, b"Unknown Error")

    def nvmlInit_v2(self) -> int:
        return self._code("nvmlInit_v2") or 0

    def nvmlShutdown(self) -> int:
        self.shutdowns += 1
        return 0

    def nvmlSystemGetDriverVersion(self, buf: Any, size: int) -> int:
        buf.value = self.smi.driver_version.encode()[:size - 1]
        return 0

    def nvmlSystemGetCudaDriverVersion_v2(self, ref: Any) -> int:
        ref._obj.value = self.cuda
        return 0

    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        ref._obj.value = len(self.smi.gpus)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, ref: Any) -> int:
        ref._obj.value = index + 1  # a handle that is never NULL
        return self._code("nvmlDeviceGetHandleByIndex_v2") or 0

    def nvmlDeviceGetPciInfo_v3(self, device: Any, ref: Any) -> int:
        ref._obj.busId = self._gpu(device).bus_id.encode()
        return 0

    def nvmlDeviceGetName(self, device: Any, buf: Any, size: int) -> int:
        buf.value = self._gpu(device).product.encode()
        return 0

    def nvmlDeviceGetVbiosVersion(self, device: Any, buf: Any, size: int) -> int:
        buf.value = self._gpu(device).vbios.encode()
        return 0

    def _enabled(self, word: str, ref: Any) -> int:
        if word not in ("Enabled", "Disabled"):
            return 3
        ref._obj.value = 1 if word == "Enabled" else 0
        return 0

    def nvmlDeviceGetPersistenceMode(self, device: Any, ref: Any) -> int:
        return self._enabled(self._gpu(device).persistence, ref)

    def nvmlDeviceGetEccMode(self, device: Any, current: Any, pending: Any) -> int:
        return self._enabled(self._gpu(device).ecc_mode, current)

    def nvmlDeviceGetSramEccErrorStatus(self, device: Any, ref: Any) -> int:
        if self._code("nvmlDeviceGetSramEccErrorStatus") is not None:
            return self._code("nvmlDeviceGetSramEccErrorStatus") or 0
        assert ref._obj.version == SRAM_V1
        split, g = self.sram_split[device.value - 1], self._gpu(device)
        if split["sram_uncorrectable_parity"]["volatile"] is None:
            return 3
        for counter in ("volatile", "aggregate"):
            setattr(ref._obj, f"{counter}UncParity", split["sram_uncorrectable_parity"][counter])
            setattr(ref._obj, f"{counter}UncSecDed", split["sram_uncorrectable_secded"][counter])
            setattr(ref._obj, f"{counter}Cor", getattr(g, f"sram_cor_{counter}"))
        return 0

    def nvmlDeviceGetMemoryErrorCounter(self, device: Any, kind: int, counter: int,
                                        location: int, ref: Any) -> int:
        memory = LOCATIONS[location]
        field = f"{memory}_{'unc' if kind == 1 else 'cor'}_" \
                f"{'volatile' if counter == 0 else 'aggregate'}"
        value = getattr(self._gpu(device), field)
        if value is None:
            return 3
        ref._obj.value = value
        return 0

    def nvmlDeviceGetRemappedRows(self, device: Any, corr: Any, unc: Any, pending: Any,
                                  failure: Any) -> int:
        g = self._gpu(device)
        if g.remapped_unc is None:
            return 3
        unc._obj.value, pending._obj.value = g.remapped_unc, int(g.remap_pending)
        failure._obj.value = int(g.remap_failure)
        return 0

    def _uint(self, value: int | None, ref: Any) -> int:
        if value is None:
            return 3
        ref._obj.value = value
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, device: Any, ref: Any) -> int:
        return self._uint(self._gpu(device).pcie_gen, ref)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, device: Any, ref: Any) -> int:
        return self._uint(self._gpu(device).pcie_gen_max, ref)

    def nvmlDeviceGetCurrPcieLinkWidth(self, device: Any, ref: Any) -> int:
        return self._uint(self._gpu(device).pcie_width, ref)

    def nvmlDeviceGetMaxPcieLinkWidth(self, device: Any, ref: Any) -> int:
        return self._uint(self._gpu(device).pcie_width_max, ref)

    def nvmlDeviceGetPerformanceState(self, device: Any, ref: Any) -> int:
        if self._code("nvmlDeviceGetPerformanceState") is not None:
            return self._code("nvmlDeviceGetPerformanceState") or 0
        return self._uint(int(self._gpu(device).pstate[1:]), ref)

    def nvmlDeviceGetCurrentClocksEventReasons(self, device: Any, ref: Any) -> int:
        ref._obj.value = sum(REASON_BITS[r] for r in self._gpu(device).active_reasons)
        return 0

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, ref: Any) -> int:
        if self._code("nvmlDeviceGetGpuFabricInfoV") is not None:
            return self._code("nvmlDeviceGetGpuFabricInfoV") or 0
        assert ref._obj.version == FABRIC_V2
        return self.nvmlDeviceGetGpuFabricInfo(device, ref)

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, ref: Any) -> int:
        _, state, status = self.fabric[device.value - 1]
        if state == "N/A":
            return 3
        ref._obj.state = STATES[state]
        if state == "Completed":  # the status is read only then (nvml.h)
            ref._obj.status = next(k for k, v in ERRORS.items() if v.decode() == status)
        return 0

    def nvmlDeviceGetRetiredPages(self, device: Any, cause: int, ref: Any, pages: Any) -> int:
        r = self.retired[device.value - 1]
        count = r.sbe if cause == node_nvml.SINGLE_BIT else r.dbe
        if count is None:
            return 3
        ref._obj.value = count
        return 7 if count else 0  # a NULL buffer too small for the pages: the count is set

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any, ref: Any) -> int:
        ref._obj.value = int(self.retired[device.value - 1].pending)
        return 0


def through_nvml(xml: str, **kw: Any) -> gpu_read.GpuRead:
    """A capture's machine read as the probe reads it: node_nvml's document, then gpu_read."""
    doc = node_nvml.Reader(StandInNvml(xml, **kw)).read()
    return gpu_read.read({"pci_gpus": 4, "nvml": {"rc": 0, "stdout": json.dumps(doc)}})


def through_xml(xml: str) -> gpu_read.GpuRead:
    return gpu_read.read({"pci_gpus": 4, "tool": "/usr/bin/nvidia-smi",
                          "nvml": {"rc": node_nvml.NO_LIBRARY, "stdout": "{}"},
                          "query": {"rc": 0, "stdout": xml}})


def variant(xml: str) -> str:
    """The capture with one GPU in trouble: HW slowdown, a row remap pending, the fabric
    still in progress, retired pages counted, and ECC counters, each its own number."""
    counts = iter(range(11, 99))
    for counter in ("volatile", "aggregate"):
        for key in ("sram_correctable", "sram_uncorrectable_parity",
                    "sram_uncorrectable_secded", "dram_correctable", "dram_uncorrectable"):
            xml = re.sub(rf"(<{counter}>(?:(?!</{counter}>).)*?<{key}>)0<", lambda m: f"{m[1]}"
                         f"{next(counts)}<", xml, count=1, flags=re.S)
    out = xml.replace("<clocks_event_reason_hw_slowdown>Not Active",
                      "<clocks_event_reason_hw_slowdown>Active", 1)
    out = out.replace("<remapped_row_pending>No", "<remapped_row_pending>Yes", 1)
    # nvml.h: the status "must be checked only if state returns complete": N/A before
    out = re.sub(r"<state>Completed</state>(\s*)<status>Success</status>",
                 r"<state>In Progress</state>\1<status>N/A</status>", out, count=1)
    return out.replace("<retired_count>N/A</retired_count>", "<retired_count>70</retired_count>", 1)


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("change", [False, True], ids=["as captured", "a GPU in trouble"])
def test_nvml_reads_what_nvidia_smi_reads(capture: str, change: bool) -> None:
    xml = (FIX / capture / "nvidia-smi-q-x.xml").read_text()
    if change:
        xml = variant(xml)
    by_nvml, by_xml = through_nvml(xml), through_xml(xml)
    assert by_nvml.smi is not None and by_nvml.error is None and by_nvml.source == gpu_read.NVML
    assert by_nvml.smi == by_xml.smi and by_nvml.fabric == by_xml.fabric
    if change:
        assert "hw_slowdown" in by_nvml.smi.gpus[0].active_reasons
        assert by_nvml.smi.gpus[0].remap_pending
        assert by_nvml.fabric[0][1] == "In Progress" or capture == "h100-x1"
        assert retired_pages.judge(by_nvml.retired, by_nvml.source).status is Status.FAIL
    assert by_nvml.retired == by_xml.retired
    assert by_xml.source == gpu_read.SMI_XML


def test_a_library_from_before_r535_reads_the_throttle_reasons() -> None:
    xml = variant((FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text())
    got = through_nvml(xml, throttle_only=True)
    assert got.smi is not None and "hw_slowdown" in got.smi.gpus[0].active_reasons


def test_cuda_version_is_written_as_nvidia_smi_writes_it() -> None:
    xml = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
    got = through_nvml(xml, cuda=12080)
    assert got.smi is not None and got.smi.cuda_version == "12.8"


def test_a_failing_gpu_fails_the_read_and_nvml_is_shut_down() -> None:
    lib = StandInNvml((FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text(),
                      codes={"nvmlDeviceGetHandleByIndex_v2": 15})
    with pytest.raises(node_nvml.Failed, match=r"nvmlDeviceGetHandleByIndex_v2: GPU is lost"):
        node_nvml.Reader(lib).read()
    assert lib.shutdowns == 1


def test_without_the_library_the_program_says_so_with_its_own_exit() -> None:
    """The real program, run as the probe runs it, on this machine (no NVIDIA driver)."""
    res = subprocess.run([sys.executable, "-S", "-c", probe.node_program.text("node_nvml.py")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == node_nvml.NO_LIBRARY
    assert "libnvidia-ml.so.1" in json.loads(res.stdout)["error"]


@pytest.mark.parametrize("doc, why", [
    ({"nvml": 1, "gpus": [{"index": 0, "bus_id": "0000:00:06.0\nx"}]}, "not a plain text"),
    ({"nvml": 1, "gpus": [{"index": 0, "pcie_gen": True}]}, "pcie_gen: not a count"),
    ({"nvml": 1, "gpus": [{"index": 0, "sram_unc_volatile": -1}]}, "not a count"),
    ({"nvml": 1, "gpus": [{"index": 1}]}, "its index is 1"),
    ({"nvml": 1, "gpus": [{"index": 0, "bus_id": "../../etc"}]}, "not a PCI address"),
    ({"nvml": 1, "gpus": [{"index": 0, "active_reasons": ["hw slowdown"]}]}, "reason names"),
    ({"nvml": 1, "gpus": [{"index": 0, "active_reasons": ["gpu_idle"] * 10}]}, "reason names"),
    ({"nvml": 1, "gpus": [{"index": 0, "product": "x" * 121}]}, "not a plain text"),
    ({"nvml": 1, "gpus": "all"}, "not a list"),
    ({"nvml": 0}, "not its document"),
])
def test_a_document_of_the_wrong_shape_is_refused(doc: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        nvml.parse(json.dumps(doc))
    got = gpu_read.read({"pci_gpus": 1, "nvml": {"rc": 0, "stdout": json.dumps(doc)}})
    assert got.smi is None and got.error and why.split(":", maxsplit=1)[0] in got.error


def test_nvml_failing_without_nvidia_smi_gives_nvmls_reason() -> None:
    got = gpu_read.read({"pci_gpus": 2, "tool": None, "nvml": {
        "rc": 1, "stdout": json.dumps({"nvml": 0, "error": "nvmlInit_v2: Driver Not Loaded"})}})
    assert got.smi is None and got.error == "the NVML read failed: nvmlInit_v2: Driver Not Loaded"


def probe_with(node: Path, nvml_source: str, monkeypatch: pytest.MonkeyPatch,
               timeout: float = 30) -> Any:
    """The real probe with a stand-in NVML read in node_nvml.py's place."""
    real = probe.source()
    carried = f"\nNVML_SOURCE = {probe.node_program.text('node_nvml.py')!r}\n"
    assert carried in real
    monkeypatch.setattr(probe, "source", lambda: real.replace(
        carried, f"\nNVML_SOURCE = {nvml_source!r}\n"))
    log = node / "smi.log"
    smi = node / "bin" / "nvidia-smi"  # the stand-in nvidia-smi, logging what it was asked
    smi.write_text(smi.read_text().replace("#!/bin/sh\n", f'#!/bin/sh\necho "$*" >>{log}\n'))
    if timeout != 30:
        monkeypatch.setattr(probe, "request", _short(probe.request, timeout))
    results, parsed = run_probe(node)
    return by_name(results), parsed, log.read_text() if log.exists() else ""


def _short(request: Any, timeout: float) -> Any:
    return lambda exp, **kw: {**request(exp, **kw), "timeout": timeout, "budget": 20}


def test_the_probe_reads_nvml_first_and_asks_nvidia_smi_only_for_nvlink(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = rig(tmp_path)
    xml = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
    doc = node_nvml.Reader(StandInNvml(xml)).read()
    by_xml, _ = run_probe(rig(tmp_path / "xml"))
    results, parsed, asked = probe_with(node, f"print({json.dumps(doc)!r})", monkeypatch)
    assert "-q -x" not in asked and "nvlink -s -e" in asked
    assert "query" not in parsed.nvidia
    # The GPU checks alike, read either way; the probe reads this machine's own state too
    # (/dev/shm's free space, which moves between the two runs): those compare by status.
    live = {"software.shm"}
    judged = {name: (r.status, None if name in live else r.measured)
              for name, r in results.items()}
    assert judged == {r.name: (r.status, None if r.name in live else r.measured)
                      for r in by_xml}
    assert results["gpu.count"].status is Status.PASS


def test_without_nvml_the_probe_reads_nvidia_smi(tmp_path: Path) -> None:
    results, parsed = run_probe(rig(tmp_path))
    assert parsed.nvidia["nvml"]["rc"] == node_nvml.NO_LIBRARY  # no driver on this machine
    assert parsed.nvidia["query"]["rc"] == 0
    assert by_name(results)["gpu.count"].status is Status.PASS


def test_a_hung_nvml_read_is_killed_and_nothing_gpu_is_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = rig(tmp_path)
    results, parsed, asked = probe_with(node, "import time\ntime.sleep(120)", monkeypatch,
                                        timeout=2)
    assert asked == ""  # nvidia-smi would hang the same way: not asked
    why = parsed.nvidia["nvml"]["unknown"]
    assert why.startswith("the NVML read gave no answer within 2 s"), why
    for name in ("gpu.count", "gpu.ecc", "gpu.retired_pages"):
        assert results[name].status is Status.UNKNOWN, name
        assert results[name].source == gpu_read.NVML and "the NVML read" in results[name].message


def test_a_crashed_nvml_read_falls_back_to_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = rig(tmp_path)
    results, parsed, asked = probe_with(
        node, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", monkeypatch)
    assert "died of signal 11" in parsed.nvidia["nvml"]["unknown"]
    assert "-q -x" in asked and results["gpu.count"].status is Status.PASS


def test_node_nvml_imports_only_the_stdlib_and_parses_as_python_3_8() -> None:
    text = probe.node_program.text("node_nvml.py")
    tree = ast.parse(text, feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in (node.names if isinstance(node, ast.Import) else
                              [ast.alias(node.module or "")])}
    assert imported == {"__future__", "ctypes", "json", "sys", "typing"}


def test_the_structures_are_laid_out_as_nvml_h_declares_them() -> None:
    """Sizes and offsets on x86-64 (the header's types: unsigned int 4, unsigned long long 8,
    char arrays as declared), and the version words NVML_STRUCT_VERSION makes of them."""
    assert ctypes.sizeof(node_nvml.PciInfo) == 68 and node_nvml.PciInfo.busId.offset == 36
    assert ctypes.sizeof(node_nvml.FabricInfo) == 28 and node_nvml.FabricInfo.state.offset == 24
    assert ctypes.sizeof(node_nvml.FabricInfoV2) | 2 << 24 == FABRIC_V2
    assert node_nvml.FabricInfoV2.healthMask.offset == 32
    assert ctypes.sizeof(node_nvml.SramStatus) | 1 << 24 == SRAM_V1
    assert node_nvml.SramStatus.bThresholdExceeded.offset == 96
    assert {name: bit for bit, name in node_nvml.REASONS} == REASON_BITS
    assert set(REASON_BITS) == nvml.REASONS
    assert (node_nvml.SRAM, node_nvml.DRAM) == (7, 2)


def test_distinct_ecc_counts_reach_the_same_fields_both_ways() -> None:
    xml = variant((FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text())
    by_nvml, by_xml = through_nvml(xml), through_xml(xml)
    assert by_nvml.smi is not None and by_nvml.smi == by_xml.smi
    g = by_nvml.smi.gpus[0]
    counts = (g.sram_unc_volatile, g.sram_unc_aggregate, g.sram_cor_volatile,
              g.sram_cor_aggregate, g.dram_unc_volatile, g.dram_unc_aggregate,
              g.dram_cor_volatile, g.dram_cor_aggregate)
    assert len(set(counts)) == len(counts) and all(counts), counts  # each its own number
    # without root the SRAM split is refused: NVML's SRAM location counters, the same sums
    refused = through_nvml(xml, codes={"nvmlDeviceGetSramEccErrorStatus": 4})
    assert refused.smi == by_xml.smi


def test_the_unversioned_fabric_call_where_v_refuses_the_version() -> None:
    xml = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
    got = through_nvml(xml, codes={"nvmlDeviceGetGpuFabricInfoV": 25})
    assert got.fabric == through_xml(xml).fabric and got.fabric[0][1:] == ("Completed", "Success")


def test_a_failing_query_fails_the_read_and_a_missing_cuda_does_not() -> None:
    xml = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
    lib = StandInNvml(xml, codes={"nvmlDeviceGetPerformanceState": 999})
    with pytest.raises(node_nvml.Failed, match="nvmlDeviceGetPerformanceState: Unknown Error"):
        node_nvml.Reader(lib).read()
    assert lib.shutdowns == 1
    no_cuda = StandInNvml(xml)
    no_cuda.nvmlSystemGetCudaDriverVersion_v2 = lambda ref: 12  # type: ignore[method-assign]
    doc = node_nvml.Reader(no_cuda).read()  # NVML_ERROR_LIBRARY_NOT_FOUND: libcuda.so.1
    assert doc["cuda_version"] is None and len(doc["gpus"]) == 4


def test_the_health_judge_reads_the_fabric_from_nvml() -> None:
    xml = (FIX / "h200-x4" / "nvidia-smi-q-x.xml").read_text()
    inp = node_inputs.inputs(Host("n1", ("g",), {}))
    for source, status in ((xml, Status.PASS), (variant(xml), Status.FAIL)):
        results, _ = health.judge({}, {}, through_nvml(source), 0, inp, None,
                                  signal_read.Previous())
        assert {r.name: r.status for r in results}["gpu.fabric"] is status


def test_nvml_failing_falls_back_to_nvidia_smi_and_the_source_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = rig(tmp_path)
    failing = ('import json, sys\nprint(json.dumps({"nvml": 0, "error": '
               '"nvmlInit_v2: Driver Not Loaded (NVML return 9)"}))\nsys.exit(1)')
    results, parsed, asked = probe_with(node, failing, monkeypatch)
    assert "-q -x" in asked and results["gpu.count"].status is Status.PASS
    read = gpu_read.read(parsed.nvidia)
    assert read.source.startswith("nvidia-smi -q -x (NVML: the NVML read failed: nvmlInit_v2")


def test_an_nvml_read_with_no_gpu_asks_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = rig(tmp_path)
    empty = {"nvml": 1, "driver_version": "580.159.04", "cuda_version": "13.0", "gpus": []}
    results, parsed, asked = probe_with(node, f"print({json.dumps(empty)!r})", monkeypatch)
    assert "-q -x" in asked and "query" in parsed.nvidia
    assert results["gpu.count"].status is Status.PASS  # the stand-in nvidia-smi sees 4
    got = gpu_read.read({"pci_gpus": 4, "nvml": {"rc": 0, "stdout": json.dumps(empty)}})
    assert got.smi is None and got.error == "the NVML read found no GPU"


def test_a_node_section_of_the_wrong_shape_is_no_crash() -> None:
    for nvidia in ({"nvml": "x", "pci_gpus": "many"}, {"query": "x"},
                   {"nvml": {"unknown": "\x1b[2J" + "y" * 1000}}):
        got = gpu_read.read(nvidia)
        assert got.smi is None and got.pci == 0
        assert all(c.isprintable() for c in (got.unknown or got.error or ""))
        assert len(got.unknown or "") <= gpu_read.LIMIT


def test_a_gpu_outside_a_fabric_reads_n_a_as_nvidia_smi_prints_it() -> None:
    """A 1x H200 answers nvmlDeviceGetGpuFabricInfoV with NVML_SUCCESS and state
    NOT_SUPPORTED (0), where nvidia-smi -q prints State N/A (the GPU machine, 2026-11-30)."""
    xml = (FIX / "h100-x1" / "nvidia-smi-q-x.xml").read_text()
    lib = StandInNvml(xml)

    def not_supported_state(device: Any, ref: Any) -> int:
        ref._obj.state = 0
        return 0

    lib.nvmlDeviceGetGpuFabricInfoV = not_supported_state  # type: ignore[method-assign]
    doc = node_nvml.Reader(lib).read()
    assert (doc["gpus"][0]["fabric_state"], doc["gpus"][0]["fabric_status"]) == ("N/A", "N/A")
    assert through_xml(xml).fabric[0][1:] == ("N/A", "N/A")
