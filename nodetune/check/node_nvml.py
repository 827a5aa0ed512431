"""Each GPU's state read through NVML, the library ``nvidia-smi`` itself reads: stdlib only,
Python >= 3.8.

The probe runs this file's source as ``PYTHON -S -c SOURCE`` (its own process: a crash or a
hang inside the library costs the probe this read only, and node_run's runner kills it on
time). It prints one JSON document and exits 0, or exits :data:`NO_LIBRARY` where
``libnvidia-ml.so.1`` cannot be loaded and 1 where NVML fails; on either the probe reads
``nvidia-smi -q -x`` as before. On 2x H200 one read took 0.068-0.076 CPU-s against
0.125-0.127 for ``nvidia-smi -q -x``, which asks every ``nvmlDevice*`` query there is to
print its whole log, and 0.08 s wall against 0.22 (docs/benchmarks.md, § The GPUs read
through NVML).

The calls, constants and structures are NVML's C API as nvml.h declares them
(NVML_API_VERSION 13, the header NVIDIA ships in github.com/NVIDIA/go-nvml gen/nvml/nvml.h
at 2f9e261, read 2026-11-30). What is read, and the ``nvidia-smi -q -x`` element it stands
for (:mod:`nodetune.check.nvml` turns the document into the same values):

- ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion_v2``: driver_version,
  cuda_version (13000 -> ``13.0``);
- ``nvmlDeviceGetPciInfo_v3`` busId, ``nvmlDeviceGetName``, ``nvmlDeviceGetVbiosVersion``;
- ``nvmlDeviceGetPersistenceMode``, ``nvmlDeviceGetEccMode`` (current): Enabled/Disabled;
- ``nvmlDeviceGetSramEccErrorStatus`` (uncorrectable parity + SEC-DED, correctable; it needs
  root, as the health check runs) where it answers, else ``nvmlDeviceGetMemoryErrorCounter``
  at NVML_MEMORY_LOCATION_SRAM (7); ``nvmlDeviceGetMemoryErrorCounter`` at
  NVML_MEMORY_LOCATION_DRAM (2); corrected/uncorrected x volatile/aggregate: ecc_errors;
- ``nvmlDeviceGetRemappedRows``: remapped_rows (uncorrectable rows, pending, failure);
- ``nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width}``: pci_gpu_link_info;
- ``nvmlDeviceGetPerformanceState``: performance_state (P0..P15);
- ``nvmlDeviceGetCurrentClocksEventReasons`` (``...ThrottleReasons`` before R535): the
  active clocks_event_reasons, named as nvidia-smi's XML elements name them;
- ``nvmlDeviceGetGpuFabricInfoV`` (v2 structure; ``nvmlDeviceGetGpuFabricInfo`` where the
  library has no ``V`` or refuses the version): fabric state and status;
- ``nvmlDeviceGetRetiredPages`` (count only), ``nvmlDeviceGetRetiredPagesPendingStatus``:
  retired_pages.

A query the GPU does not support (NVML_ERROR_NOT_SUPPORTED) reads as ``null``, as
nvidia-smi prints ``N/A``, and so does the CUDA version where libcuda.so.1 is missing; any
other failure of a GPU's query fails the read (exit 1, the call and NVML's error string),
so the probe falls back to ``nvidia-smi -q -x``.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

LIBRARY = "libnvidia-ml.so.1"
NO_LIBRARY = 3
SUCCESS, NOT_SUPPORTED, INSUFFICIENT_SIZE = 0, 3, 7  # nvmlReturn_t
VERSION_MISMATCH = 25                                # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
ENABLED = 1                                          # NVML_FEATURE_ENABLED
CORRECTED, UNCORRECTED = 0, 1                        # nvmlMemoryErrorType_t
VOLATILE, AGGREGATE = 0, 1                           # nvmlEccCounterType_t
DRAM, SRAM = 2, 7                                    # nvmlMemoryLocation_t
SINGLE_BIT, DOUBLE_BIT = 0, 1                        # nvmlPageRetirementCause_t
PSTATE_UNKNOWN = 32
# nvmlClocksEventReason*, in the order nvidia-smi -q -x prints <clocks_event_reasons>, each
# with the name its element carries after "clocks_event_reason_".
REASONS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
           (0x8, "hw_slowdown"), (0x40, "hw_thermal_slowdown"),
           (0x80, "hw_power_brake_slowdown"), (0x10, "sync_boost"),
           (0x20, "sw_thermal_slowdown"), (0x100, "display_clocks_setting"))
# NVML_GPU_FABRIC_STATE_*; NOT_SUPPORTED (0), answered with NVML_SUCCESS by a GPU outside an
# NVLink fabric, is what nvidia-smi -q prints as N/A (1x H200, driver 580.159.04, 2026-11-30)
FABRIC_STATES = {0: "N/A", 1: "Not Started", 2: "In Progress", 3: "Completed"}


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t."""

    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class FabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t (the structure without a version)."""

    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte)]


class FabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t; its version is NVML_STRUCT_VERSION(GpuFabricInfo, 2)."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint)]


class SramStatus(ctypes.Structure):
    """nvmlEccSramErrorStatus_v1_t; its version is NVML_STRUCT_VERSION(EccSramErrorStatus, 1)."""

    _fields_ = [("version", ctypes.c_uint), ("aggregateUncParity", ctypes.c_ulonglong),
                ("aggregateUncSecDed", ctypes.c_ulonglong), ("aggregateCor", ctypes.c_ulonglong),
                ("volatileUncParity", ctypes.c_ulonglong),
                ("volatileUncSecDed", ctypes.c_ulonglong), ("volatileCor", ctypes.c_ulonglong),
                ("aggregateUncBucketL2", ctypes.c_ulonglong),
                ("aggregateUncBucketSm", ctypes.c_ulonglong),
                ("aggregateUncBucketPcie", ctypes.c_ulonglong),
                ("aggregateUncBucketMcu", ctypes.c_ulonglong),
                ("aggregateUncBucketOther", ctypes.c_ulonglong),
                ("bThresholdExceeded", ctypes.c_uint)]


class Failed(Exception):
    """An NVML call failed with something other than NOT_SUPPORTED."""


class Reader:
    """NVML's calls on one library object (``ctypes.CDLL``; the unit tests' stand-in)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def call(self, name: str, *args: Any) -> bool:
        """Call ``name``: True on success, False where not supported.

        Raises:
            Failed: any other return.
        """
        code = int(getattr(self.lib, name)(*args))
        if code == SUCCESS:
            return True
        if code == NOT_SUPPORTED:
            return False
        raise Failed(f"{name}: {self.error(code)} (NVML return {code})")

    def error(self, code: int) -> str:
        """NVML's own words for ``code`` (nvmlErrorString)."""
        try:
            text = self.lib.nvmlErrorString(code)
        except Exception:  # the code itself then says it
            return "error"
        return text.decode(errors="replace") if isinstance(text, bytes) else str(text)

    def text(self, name: str, *args: Any, size: int = 96) -> str | None:
        buf = ctypes.create_string_buffer(size)
        if not self.call(name, *args, buf, size):
            return None
        return buf.value.decode(errors="replace")

    def uint(self, name: str, *args: Any) -> int | None:
        value = ctypes.c_uint(0)
        return value.value if self.call(name, *args, ctypes.byref(value)) else None

    def enabled(self, name: str, device: Any) -> str:
        """"Enabled", "Disabled", or "N/A" where not supported (nvidia-smi's words)."""
        mode = self.uint(name, device)
        return "N/A" if mode is None else "Enabled" if mode == ENABLED else "Disabled"

    def ecc_mode(self, device: Any) -> str:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        if not self.call("nvmlDeviceGetEccMode", device, ctypes.byref(current),
                         ctypes.byref(pending)):
            return "N/A"
        return "Enabled" if current.value == ENABLED else "Disabled"

    def errors(self, device: Any, kind: int, counter: int, location: int) -> int | None:
        count = ctypes.c_ulonglong(0)
        got = self.call("nvmlDeviceGetMemoryErrorCounter", device, kind, counter, location,
                        ctypes.byref(count))
        return count.value if got else None

    def sram(self, device: Any) -> dict[str, int | None]:
        """The SRAM counters as nvidia-smi prints them: uncorrectable = parity + SEC-DED
        (nvmlDeviceGetSramEccErrorStatus, root only); where that does not answer, NVML's
        SRAM location counters."""
        if hasattr(self.lib, "nvmlDeviceGetSramEccErrorStatus"):
            status = SramStatus()
            status.version = ctypes.sizeof(SramStatus) | (1 << 24)
            if int(self.lib.nvmlDeviceGetSramEccErrorStatus(device,
                                                            ctypes.byref(status))) == SUCCESS:
                return {"sram_unc_volatile": status.volatileUncParity + status.volatileUncSecDed,
                        "sram_unc_aggregate": (status.aggregateUncParity
                                               + status.aggregateUncSecDed),
                        "sram_cor_volatile": status.volatileCor,
                        "sram_cor_aggregate": status.aggregateCor}
        return {f"sram_{kind_name}_{counter_name}": self.errors(device, kind, counter, SRAM)
                for kind, kind_name in ((UNCORRECTED, "unc"), (CORRECTED, "cor"))
                for counter, counter_name in ((VOLATILE, "volatile"), (AGGREGATE, "aggregate"))}

    def reasons(self, device: Any) -> list[str] | None:
        mask = ctypes.c_ulonglong(0)
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(self.lib, name):  # a library from before R535
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        if not self.call(name, device, ctypes.byref(mask)):
            return None
        return [text for bit, text in REASONS if mask.value & bit]

    def remapped(self, device: Any) -> dict[str, Any]:
        corr, unc, pending, failure = (ctypes.c_uint(0) for _ in range(4))
        if not self.call("nvmlDeviceGetRemappedRows", device, ctypes.byref(corr),
                         ctypes.byref(unc), ctypes.byref(pending), ctypes.byref(failure)):
            return {"remapped_unc": None, "remap_pending": False, "remap_failure": False}
        return {"remapped_unc": unc.value, "remap_pending": bool(pending.value),
                "remap_failure": bool(failure.value)}

    def fabric(self, device: Any) -> tuple[str, str]:
        """(state, status) as nvidia-smi prints them; ("N/A", "N/A") where not supported."""
        info: Any = FabricInfoV2()
        info.version = ctypes.sizeof(FabricInfoV2) | (2 << 24)
        code = (int(self.lib.nvmlDeviceGetGpuFabricInfoV(device, ctypes.byref(info)))
                if hasattr(self.lib, "nvmlDeviceGetGpuFabricInfoV") else VERSION_MISMATCH)
        if code != VERSION_MISMATCH:
            if code not in (SUCCESS, NOT_SUPPORTED):
                raise Failed(f"nvmlDeviceGetGpuFabricInfoV: {self.error(code)} "
                             f"(NVML return {code})")
            got = code == SUCCESS
        else:  # no V in this library, or a version it does not know: the unversioned call
            info = FabricInfo()
            got = self.call("nvmlDeviceGetGpuFabricInfo", device, ctypes.byref(info))
        if not got:
            return "N/A", "N/A"
        state = FABRIC_STATES.get(int(info.state), f"Unknown ({int(info.state)})")
        # the status is only meaningful once the probe completed (nvml.h)
        return state, self.error(int(info.status)) if int(info.state) == 3 else "N/A"

    def retired(self, device: Any, cause: int) -> int | None:
        count = ctypes.c_uint(0)
        code = int(self.lib.nvmlDeviceGetRetiredPages(device, cause, ctypes.byref(count), None))
        if code in (SUCCESS, INSUFFICIENT_SIZE):  # count holds the pages either way
            return count.value
        if code == NOT_SUPPORTED:
            return None
        raise Failed(f"nvmlDeviceGetRetiredPages: {self.error(code)} (NVML return {code})")

    def gpu(self, index: int) -> dict[str, Any]:
        device = ctypes.c_void_p()
        if not self.call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(device)):
            raise Failed(f"nvmlDeviceGetHandleByIndex_v2: GPU {index}: not supported")
        pci = PciInfo()
        bus_id = (pci.busId.decode(errors="replace")
                  if self.call("nvmlDeviceGetPciInfo_v3", device, ctypes.byref(pci)) else None)
        pstate = self.uint("nvmlDeviceGetPerformanceState", device)
        out: dict[str, Any] = {
            "index": index, "bus_id": bus_id,
            "product": self.text("nvmlDeviceGetName", device),
            "persistence": self.enabled("nvmlDeviceGetPersistenceMode", device),
            "ecc_mode": self.ecc_mode(device)}
        out.update(self.sram(device))
        for kind, kind_name in ((UNCORRECTED, "unc"), (CORRECTED, "cor")):
            for counter, counter_name in ((VOLATILE, "volatile"), (AGGREGATE, "aggregate")):
                out[f"dram_{kind_name}_{counter_name}"] = self.errors(device, kind, counter,
                                                                      DRAM)
        out.update(self.remapped(device))
        out.update({
            "pcie_gen": self.uint("nvmlDeviceGetCurrPcieLinkGeneration", device),
            "pcie_gen_max": self.uint("nvmlDeviceGetMaxPcieLinkGeneration", device),
            "pcie_width": self.uint("nvmlDeviceGetCurrPcieLinkWidth", device),
            "pcie_width_max": self.uint("nvmlDeviceGetMaxPcieLinkWidth", device),
            "pstate": "?" if pstate is None or pstate == PSTATE_UNKNOWN else f"P{pstate}",
            "active_reasons": self.reasons(device),
            "vbios": self.text("nvmlDeviceGetVbiosVersion", device, size=32)})
        out["fabric_state"], out["fabric_status"] = self.fabric(device)
        pending = self.uint("nvmlDeviceGetRetiredPagesPendingStatus", device)
        out.update({"retired_sbe": self.retired(device, SINGLE_BIT),
                    "retired_dbe": self.retired(device, DOUBLE_BIT),
                    "retired_pending": pending == ENABLED})
        return out

    def read(self) -> dict[str, Any]:
        """The whole document (nvmlInit_v2 ... nvmlShutdown).

        Raises:
            Failed: NVML could not start, or a GPU's query failed.
        """
        self.call("nvmlInit_v2")
        try:
            cuda = ctypes.c_int(0)
            # fails where libcuda.so.1 is missing (nvml.h): the GPUs are still read
            got_cuda = int(self.lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda))) == 0
            doc: dict[str, Any] = {
                "nvml": 1, "library": LIBRARY,
                "driver_version": self.text("nvmlSystemGetDriverVersion", size=80),
                "cuda_version": (f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
                                 if got_cuda else None)}
            count = self.uint("nvmlDeviceGetCount_v2")
            doc["gpus"] = [self.gpu(i) for i in range(count or 0)]
            return doc
        finally:
            self.lib.nvmlShutdown()


def main() -> int:
    try:
        lib = ctypes.CDLL(LIBRARY)
        lib.nvmlErrorString.restype = ctypes.c_char_p
    except (OSError, AttributeError) as exc:
        print(json.dumps({"nvml": 0, "error": f"{LIBRARY}: {str(exc)[:300]}"}))
        return NO_LIBRARY
    try:
        doc = Reader(lib).read()
    except (Failed, AttributeError) as exc:  # AttributeError: a call this library lacks
        print(json.dumps({"nvml": 0, "error": str(exc)[:300]}))
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
