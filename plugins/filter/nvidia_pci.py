"""Filters for the nvidia_driver role: what a node's PCI devices say it needs."""

from __future__ import annotations

from typing import Any

NVIDIA = "0x10de"
MELLANOX = "0x15b3"
# PCI class 0x03xxxx: display controller (GPUs; NVIDIA's audio/USB functions are not).
DISPLAY_CLASS = "0x03"

# NVSwitch PCI device ids the driver's nvswitch module binds: LR10 (A100 HGX) and LS10
# (H100/H200 HGX, endpoint and Laguna bridge functions). Source: NVIDIA/open-gpu-kernel-modules,
# src/common/nvswitch/kernel/nvswitch.c (nvswitch_lr10_device_ids, nvswitch_ls10_device_ids),
# release 595.45.04 (2026-03-05).
NVSWITCH_IDS = frozenset(
    [0x1AE8, *range(0x1AF0, 0x1B00), *range(0x22A0, 0x22B0)])

# GPUs that only the open kernel modules support (NVIDIA: "for Grace Hopper or Blackwell you
# must use the open-source GPU kernel modules"; open-gpu-kernel-modules README, 595.45.04):
# Grace Hopper GH200 (0x2342, 0x2348) and every Blackwell device id (0x29xx-0x2Fxx GB10x/GB20x,
# 0x31xx GB110/B300).
GRACE_HOPPER_IDS = frozenset({0x2342, 0x2348})

# Blackwell data-center boards with NVLink 5, whose NVSwitch fabric Fabric Manager runs with
# NVLSM and ib_umad (Fabric Manager user guide): B200, GB200, B300, GB300 (README, 595.45.04).
NVLINK5_IDS = frozenset({0x2901, 0x2941, 0x3182, 0x31C2})


def _id(text: object) -> int:
    try:
        return int(str(text), 16)
    except ValueError:
        return -1


def _blackwell(device: int) -> bool:
    return 0x2900 <= device <= 0x2FFF or 0x3100 <= device <= 0x31FF


def nvidia_pci_summary(pci: Any) -> dict[str, Any]:
    """What a node's PCI devices (node_facts' ``pci`` list) mean for the driver stack.

    Returns:
        ``gpu`` (an NVIDIA display-class function), ``nvswitch`` (NVSwitch functions),
        ``nvlink5`` (a Blackwell NVLink 5 board), ``fabric`` (Fabric Manager needed: either),
        ``open_required`` (device ids of GPUs only the open modules support),
        ``rdma_nic`` (a Mellanox/NVIDIA networking function), ``gpus`` (GPU device ids).
    """
    devices = [d for d in (pci or []) if isinstance(d, dict)]
    gpus = [d for d in devices if str(d.get("vendor", "")).lower() == NVIDIA
            and str(d.get("class", "")).lower().startswith(DISPLAY_CLASS)]
    gpu_ids = [_id(d.get("device")) for d in gpus]
    nvswitch = [d for d in devices if str(d.get("vendor", "")).lower() == NVIDIA
                and _id(d.get("device")) in NVSWITCH_IDS]
    nvlink5 = any(i in NVLINK5_IDS for i in gpu_ids)
    return {
        "gpu": bool(gpus),
        "gpus": sorted({f"0x{i:04x}" for i in gpu_ids if i >= 0}),
        "nvswitch": len(nvswitch),
        "nvlink5": nvlink5,
        "fabric": bool(nvswitch) or nvlink5,
        "open_required": sorted({f"0x{i:04x}" for i in gpu_ids
                                 if i in GRACE_HOPPER_IDS or _blackwell(i)}),
        "rdma_nic": any(str(d.get("vendor", "")).lower() == MELLANOX for d in devices),
    }


def nvidia_cuda_major(branch: object) -> int:
    """The CUDA major version a driver branch runs (its nvidia-smi "CUDA Version").

    CUDA 13.0 needs driver >= 580.65.06, CUDA 12.0 >= 525.60.13 (CUDA toolkit release notes,
    table 3): 580 and later run CUDA 13, 525-579 CUDA 12, older CUDA 11.
    """
    number = int(str(branch))
    return 13 if number >= 580 else 12 if number >= 525 else 11


class FilterModule:
    """nvidia_driver's filters."""

    def filters(self) -> dict[str, Any]:
        return {"nvidia_pci_summary": nvidia_pci_summary, "nvidia_cuda_major": nvidia_cuda_major}
