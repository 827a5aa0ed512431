"""GPU checks from the GPUs as the probe read them (:mod:`~nodetune.check.gpu_read`: NVML, or
``nvidia-smi -q -x`` parsed by :mod:`~nodetune.check.nvidia_smi`) and ``nvidia-smi nvlink -s``.

ECC and row-remap limits are Azure NHC's (``customTests/azure_gpu_ecc.nhc`` in
Azure/azurehpc-health-checks, run as ``check_gpu_ecc 20000000 10000``): a
pending row remap, a remap failure, more than 512 uncorrectable remapped rows,
any SRAM uncorrectable error, more than 10,000 SRAM correctable errors, or
more than 20,000,000 DRAM errors fail the GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from nodetune.action import Action
from nodetune.check import retired_pages
from nodetune.check.expect import VAR_EXPECTED_GPUS, Expectations
from nodetune.check.gpu_fabric import module_flavour
from nodetune.check.gpu_read import GpuRead, Links
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.nvidia_smi import Gpu, SmiLog
from nodetune.check.probe_parse import Probe

NHC = "Azure NHC azure_gpu_ecc.nhc"
NHC_DRAM_LIMIT = 20_000_000
NHC_SRAM_CORRECTABLE_LIMIT = 10_000
NHC_REMAPPED_UNC_LIMIT = 512
# NVML clock event reasons that mean the hardware cut the clocks (HW slowdown halves them
# or more: thermal, power brake); the software ones are the driver's policy.
HW_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_WARN_REASONS = ("sw_thermal_slowdown",)
NVML_REASONS = "NVML clocks event reasons (nvidia-smi -q: Clocks Event Reasons)"
SNAPSHOT = " (active when read: one reading, not its share of a sampling window)"
GPU_NAMES = ("gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.pcie",
             "gpu.clocks", "gpu.nvlink", "gpu.retired_pages")
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.count",
     "GPUs the driver sees = nodetune_expected_gpus; none missing from the PCI bus"),
    ("gpu.driver",
     "running driver = nvidia_driver_version (warns if only the role default pins it)"),
    ("gpu.persistence",
     "persistence mode on (nvidia_driver_persistenced)"),
    ("gpu.ecc",
     "Azure NHC limits: no pending/failed row remap, <= 512 remapped rows,",
     "no SRAM uncorrectable, SRAM correctable <= 10000, DRAM <= 20000000"),
    ("gpu.pcie",
     "link gen and width at their maximum"),
    ("gpu.clocks",
     "no HW slowdown / HW thermal / power brake (SW thermal warns)"),
    ("gpu.nvlink",
     "every NVLink up, same count on every GPU"),
    *retired_pages.HELP,
)


def judge_probe(probe: Probe, exp: Expectations, gpus: GpuRead) -> list[CheckResult]:
    """:data:`GPU_NAMES`, in that order, from the GPUs as the probe read them: not assessed
    where the read hung or crashed, skipped (but gpu.count) where there is no GPU data."""
    smi, smi_error, pci = gpus.smi, gpus.error, gpus.pci
    if gpus.unknown:  # the read hung or crashed: nothing GPU is assessed
        return [unknown(name, f"could not be assessed: {gpus.unknown}", source=gpus.source)
                for name in GPU_NAMES]
    if smi is None and smi_error is None and pci == 0:
        return [judge_count(None, 0, exp) if exp.expected_gpus else
                skipped("gpu.count", "no GPU (no nvidia-smi, no NVIDIA device on the PCI "
                        "bus)", source="nodetune_expected_gpus"),
                *(skipped(name, "no GPU") for name in GPU_NAMES[1:])]
    if smi is None:
        error = smi_error or (f"{pci} NVIDIA GPU(s) on the PCI bus but no nvidia-smi "
                              "(driver not installed?)")
        return [judge_count(None, pci, exp, error=error),
                *(skipped(name, f"no GPU data from {gpus.source}") for name in GPU_NAMES[1:])]
    flavour = module_flavour(probe.nvidia.get("module"))
    return [judge_count(smi, pci, exp), judge_driver(smi, exp, flavour),
            judge_persistence(smi, exp), judge_ecc(smi), judge_pcie(smi),
            judge_clocks(smi), judge_nvlink(smi, gpus.nvlink),
            retired_pages.judge(gpus.retired, gpus.source)]


def _gpu_list(gpus: Sequence[Gpu]) -> str:
    return ", ".join(g.label for g in gpus)


def judge_count(smi: SmiLog | None, pci_gpus: int, exp: Expectations,
                error: str | None = None) -> CheckResult:
    """GPUs the driver sees against ``nodetune_expected_gpus`` and against the PCI bus."""
    seen = len(smi.gpus) if smi else 0
    want = exp.expected_gpus
    expected = str(want) if want is not None else f"{VAR_EXPECTED_GPUS} not set"
    if error:
        return failed("gpu.count", f"0 ({pci_gpus} on the PCI bus)", expected,
                      VAR_EXPECTED_GPUS, error)
    if want is not None and seen != want:
        bus = f"; {pci_gpus} NVIDIA GPU(s) on the PCI bus" if pci_gpus != seen else ""
        return failed("gpu.count", str(seen), str(want), VAR_EXPECTED_GPUS,
                      f"{seen} GPU(s) visible to the driver, {want} expected{bus}")
    if pci_gpus > seen:
        return failed("gpu.count", str(seen), f"{pci_gpus} (PCI bus)", "PCI bus (vendor 0x10de)",
                      f"{pci_gpus} NVIDIA GPU(s) on the PCI bus but the driver sees {seen}")
    return passed("gpu.count", str(seen), expected, VAR_EXPECTED_GPUS)


def upstream_version(package_version: str) -> str:
    """``1:550.127.08-1`` (a package version) -> ``550.127.08`` (what the driver reports)."""
    version = package_version.split(":", 1)[-1]
    return version.split("-", 1)[0]


def judge_driver(smi: SmiLog, exp: Expectations, flavour: str | None = None) -> CheckResult:
    """The running driver against the pinned ``nvidia_driver_version``, and the loaded
    module's flavour (when the probe read it) against ``nvidia_driver_kernel_modules``."""
    pin = exp.driver_version
    if pin is None:
        return skipped("gpu.driver", "nvidia_driver_version is empty: no pinned version",
                       source="nvidia_driver_version")
    want = upstream_version(str(pin.value))
    flavours = exp.kernel_modules
    if flavour and flavours is not None and flavours.value and flavour != flavours.value:
        measured, expected = f"{smi.driver_version} {flavour}", f"{want} {flavours.value}"
        message = (f"the loaded kernel module is {flavour}, nvidia_driver_kernel_modules is "
                   f"{flavours.value}")
        if smi.driver_version != want:
            message = f"driver {smi.driver_version} is running, {want} is pinned; " + message
        check = failed if flavours.from_inventory else warned
        return check("gpu.driver", measured, expected, f"{pin.source}, {flavours.source}",
                     message + " (a reboot is pending, or the driver was installed outside "
                     "nodetune)")
    if smi.driver_version == want:
        return passed("gpu.driver", f"{smi.driver_version} {flavour}" if flavour
                      else smi.driver_version, want, pin.source,
                      f"{flavour} kernel module" if flavour else "")
    message = f"driver {smi.driver_version} is running, {want} is pinned"
    if not pin.from_inventory:
        return warned("gpu.driver", smi.driver_version, want, pin.source,
                      message + " by the role default only; set nvidia_driver_version in the "
                      "inventory to the version this fleet runs")
    return failed("gpu.driver", smi.driver_version, want, pin.source,
                  message + " (upgraded or rolled back outside nodetune, or a reboot is pending)")


def judge_persistence(smi: SmiLog, exp: Expectations) -> CheckResult:
    """Persistence mode on every GPU when ``nvidia_driver_persistenced`` asks for it."""
    if not exp.persistenced:
        return skipped("gpu.persistence", "nvidia_driver_persistenced is false",
                       source="nvidia_driver_persistenced")
    off = [g for g in smi.gpus if g.persistence != "Enabled"]
    measured = f"{len(smi.gpus) - len(off)}/{len(smi.gpus)} Enabled"
    if off:
        return failed("gpu.persistence", measured, "Enabled", "nvidia_driver_persistenced",
                      f"persistence mode off on {_gpu_list(off)}; start nvidia-persistenced "
                      "(nodetune apply --tags nvidia_driver)")
    return passed("gpu.persistence", measured, "Enabled", "nvidia_driver_persistenced")


def _ecc_problems(g: Gpu) -> tuple[list[str], list[str]]:
    fail, warn = [], []
    if g.remap_pending:
        fail.append("row remap pending (reset the GPU)")
    if g.remap_failure:
        fail.append("row remap failure")
    if (g.remapped_unc or 0) > NHC_REMAPPED_UNC_LIMIT:
        fail.append(f"{g.remapped_unc} uncorrectable remapped rows > {NHC_REMAPPED_UNC_LIMIT}")
    sram_unc = max(g.sram_unc_volatile or 0, g.sram_unc_aggregate or 0)
    if sram_unc > 0:
        fail.append(f"{sram_unc} SRAM uncorrectable error(s)")
    sram_cor = max(g.sram_cor_volatile or 0, g.sram_cor_aggregate or 0)
    if sram_cor > NHC_SRAM_CORRECTABLE_LIMIT:
        fail.append(f"{sram_cor} SRAM correctable errors > {NHC_SRAM_CORRECTABLE_LIMIT}")
    dram = max(g.dram_unc_volatile or 0, g.dram_unc_aggregate or 0,
               g.dram_cor_volatile or 0, g.dram_cor_aggregate or 0)
    if dram > NHC_DRAM_LIMIT:
        fail.append(f"{dram} DRAM ECC errors > {NHC_DRAM_LIMIT}")
    elif max(g.dram_unc_volatile or 0, g.dram_unc_aggregate or 0) > 0:
        warn.append(f"{max(g.dram_unc_volatile or 0, g.dram_unc_aggregate or 0)} DRAM "
                    "uncorrectable error(s), handled by row remapping")
    if g.ecc_mode not in ("Enabled", "?", "N/A"):
        warn.append(f"ECC mode {g.ecc_mode}")
    return fail, warn


def judge_ecc(smi: SmiLog) -> CheckResult:
    """ECC counters and row remapping, with Azure NHC's limits."""
    expected = (f"no pending/failed remap, remapped unc <= {NHC_REMAPPED_UNC_LIMIT}, SRAM unc 0, "
                f"SRAM cor <= {NHC_SRAM_CORRECTABLE_LIMIT}, DRAM <= {NHC_DRAM_LIMIT}")
    fails, warns = [], []
    for g in smi.gpus:
        f, w = _ecc_problems(g)
        fails += [f"{g.label}: {m}" for m in f]
        warns += [f"{g.label}: {m}" for m in w]
    sram = sum(max(g.sram_unc_volatile or 0, g.sram_unc_aggregate or 0) for g in smi.gpus)
    dram = sum(max(g.dram_unc_volatile or 0, g.dram_unc_aggregate or 0) for g in smi.gpus)
    pending = sum(g.remap_pending for g in smi.gpus)
    measured = f"unc SRAM {sram}, DRAM {dram}; remap pending {pending}"
    if fails:  # a failed remap is an RMA matter, a pending one a GPU reset (nodetune.action)
        return failed("gpu.ecc", measured, expected, NHC, "; ".join(fails),
                      action=Action.SERVICE if any(g.remap_failure for g in smi.gpus)
                      else None)
    if warns:
        return warned("gpu.ecc", measured, expected, NHC, "; ".join(warns))
    return passed("gpu.ecc", measured, expected, NHC)


def judge_pcie(smi: SmiLog) -> CheckResult:
    """Each GPU's PCIe link trained at its maximum generation and width."""
    fails, warns = [], []
    for g in smi.gpus:
        if None in (g.pcie_width, g.pcie_width_max, g.pcie_gen, g.pcie_gen_max):
            warns.append(f"{g.label}: link not reported")
            continue
        assert g.pcie_width is not None and g.pcie_width_max is not None
        assert g.pcie_gen is not None and g.pcie_gen_max is not None
        if g.pcie_width < g.pcie_width_max:
            fails.append(f"{g.label}: x{g.pcie_width}, max x{g.pcie_width_max}")
        if g.pcie_gen < g.pcie_gen_max:
            text = f"{g.label}: gen {g.pcie_gen}, max gen {g.pcie_gen_max}"
            # An idle GPU in a low power state may train its link down on its own.
            if g.pstate in ("P0", "P1", "P2"):
                fails.append(text)
            else:
                warns.append(f"{text} in {g.pstate} (idle GPUs may train down; check under load)")
    links = sorted({f"gen{g.pcie_gen} x{g.pcie_width}" for g in smi.gpus})
    maxes = sorted({f"gen{g.pcie_gen_max} x{g.pcie_width_max}" for g in smi.gpus})
    measured, expected = ", ".join(links), ", ".join(maxes)
    source = "the GPUs' own max link gen/width"
    if fails:
        return failed("gpu.pcie", measured, expected, source, "; ".join(fails))
    if warns:
        return warned("gpu.pcie", measured, expected, source, "; ".join(warns))
    return passed("gpu.pcie", measured, expected, source)


def judge_clocks(smi: SmiLog) -> CheckResult:
    """No hardware slowdown active; a software thermal slowdown warns."""
    fails = [f"{g.label}: {', '.join(r for r in g.active_reasons if r in HW_REASONS)}"
             for g in smi.gpus if any(r in HW_REASONS for r in g.active_reasons)]
    warns = [f"{g.label}: {', '.join(r for r in g.active_reasons if r in SW_WARN_REASONS)}"
             for g in smi.gpus if any(r in SW_WARN_REASONS for r in g.active_reasons)]
    active = sorted({r for g in smi.gpus for r in g.active_reasons})
    measured = ", ".join(active) or "none active"
    expected = "no " + "/".join(HW_REASONS)
    if fails:
        return failed("gpu.clocks", measured, expected, NVML_REASONS,
                      "hardware slowdown (clocks cut by half or more: cooling, power "
                      "supply): " + "; ".join(fails) + SNAPSHOT)
    if warns:
        return warned("gpu.clocks", measured, expected, NVML_REASONS,
                      "software thermal slowdown: " + "; ".join(warns))
    return passed("gpu.clocks", measured, expected, NVML_REASONS)


def judge_nvlink(smi: SmiLog, links: Links) -> CheckResult:
    """Every NVLink of every GPU up, and the same number of links on each GPU (``links``
    a string: why ``nvidia-smi nvlink -s`` could not be assessed)."""
    if isinstance(links, str):
        return unknown("gpu.nvlink", f"could not be assessed: {links}",
                       source="nvidia-smi nvlink -s")
    if links is None:
        return skipped("gpu.nvlink", "nvidia-smi nvlink -s gave no answer")
    if not any(links.values()):
        return skipped("gpu.nvlink", "no NVLink on these GPUs")
    down = [f"GPU {i} link {n}" for i, per in sorted(links.items())
            for n, state in sorted(per.items()) if "inactive" in state.lower()
            or not re.match(r"^[\d.]+\s*GB/s", state)]
    up = {i: sum(1 for s in per.values() if re.match(r"^[\d.]+\s*GB/s", s))
          for i, per in links.items()}
    most = max(up.values())
    measured = ", ".join(f"GPU {i}: {n}" for i, n in sorted(up.items())) + " links up"
    expected = f"{most} links up on each of {len(smi.gpus)} GPU(s)"
    source = "nvidia-smi nvlink -s"
    missing = [i for i in range(len(smi.gpus)) if i not in links]
    if down or missing or len(set(up.values())) > 1:
        parts = ([f"down: {', '.join(down)}"] if down else []) + (
            [f"GPU(s) {missing} list no links"] if missing else [])
        if not parts:
            parts = [f"uneven link counts ({measured})"]
        return failed("gpu.nvlink", measured, expected, source, "; ".join(parts))
    return passed("gpu.nvlink", measured, expected, source)
