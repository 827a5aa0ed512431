"""Software alignment: torch and its CUDA against the driver, NCCL, and /dev/shm."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.expect import VAR_PYTHON, Expectations
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.probe_parse import Probe
from nodetune.measure.shm import SHM, VAR_MIN_SHM, human

CUDA_COMPAT = "CUDA compatibility guide (the driver's CUDA version is the newest it runs)"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("software.torch",
     "nodetune_python imports torch (skipped when nodetune_python is unset)"),
    ("software.cuda",
     "torch's CUDA <= the CUDA version the driver supports"),
    ("software.nccl",
     "torch.distributed.is_nccl_available(), with NCCL's version"),
    ("software.shm",
     "free space in /dev/shm >= nodetune_min_shm (default 1G: NCCL asks --shm-size=1g)"),
)


def _version(text: str | None) -> tuple[int, ...] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2])) if m else None


def judge_probe(probe: Probe, exp: Expectations, gpus: GpuRead) -> list[CheckResult]:
    """software.torch, .cuda, .nccl and .shm from what the probe read."""
    return [judge_torch(probe.torch, exp), judge_cuda(probe.torch, gpus.smi),
            judge_nccl(probe.torch, gpus.smi), judge_shm(probe.shm, exp)]


def judge_torch(torch: Mapping[str, Any] | None, exp: Expectations) -> CheckResult:
    """torch importable by ``nodetune_python`` (skipped when that is not set)."""
    if exp.torch_python is None:
        return skipped("software.torch", f"{VAR_PYTHON} is not set: no torch to check",
                       source=VAR_PYTHON)
    if torch is None or torch.get("error"):
        error = (torch or {}).get("error", "no answer")
        return failed("software.torch", "not importable", "torch importable", VAR_PYTHON,
                      f"{exp.torch_python} cannot import torch ({error})")
    cuda = torch.get("cuda") or "CPU build"
    return passed("software.torch", f"torch {torch.get('torch')} ({cuda})", "torch importable",
                  VAR_PYTHON)


def judge_cuda(torch: Mapping[str, Any] | None, smi: SmiLog | None) -> CheckResult:
    """torch's CUDA runtime is no newer than the CUDA version the driver supports."""
    name = "software.cuda"
    if smi is None or not smi.gpus:
        return skipped(name, "no GPU")
    if torch is None or torch.get("error"):
        return skipped(name, "torch not available (software.torch)")
    have, drv = _version(torch.get("cuda")), _version(smi.cuda_version)
    expected = f"<= {smi.cuda_version} (driver {smi.driver_version})"
    if have is None:
        return failed(name, "CPU build", expected, CUDA_COMPAT,
                      f"torch {torch.get('torch')} is a CPU build on a node with "
                      f"{len(smi.gpus)} GPU(s)")
    if drv is None:
        return skipped(name, f"the driver reports no CUDA version ({smi.cuda_version})")
    measured = f"torch CUDA {torch.get('cuda')}"
    if have[0] > drv[0]:
        return failed(name, measured, expected, CUDA_COMPAT,
                      f"torch needs CUDA {torch.get('cuda')}; driver {smi.driver_version} "
                      f"supports up to {smi.cuda_version}: upgrade the driver or use a torch "
                      f"built for CUDA {drv[0]}.x")
    if have > drv:
        return warned(name, measured, expected, CUDA_COMPAT,
                      f"torch CUDA {torch.get('cuda')} is newer than the driver's "
                      f"{smi.cuda_version}: runs under minor-version compatibility, but PTX "
                      "JIT and some features need a newer driver")
    return passed(name, measured, expected, CUDA_COMPAT)


def judge_nccl(torch: Mapping[str, Any] | None, smi: SmiLog | None) -> CheckResult:
    """torch.distributed has NCCL on a GPU node, and says which version."""
    name = "software.nccl"
    if smi is None or not smi.gpus:
        return skipped(name, "no GPU (gloo carries CPU collectives)")
    if torch is None or torch.get("error"):
        return skipped(name, "torch not available (software.torch)")
    version = torch.get("nccl")
    if not torch.get("nccl_available") or not version:
        why = torch.get("nccl_error") or "torch.distributed.is_nccl_available() is False"
        return failed(name, str(version or "none"), "NCCL available",
                      "torch.distributed.is_nccl_available()",
                      f"torch {torch.get('torch')} has no usable NCCL ({why})")
    return passed(name, f"NCCL {version}", "NCCL available",
                  "torch.distributed.is_nccl_available()")


def judge_shm(shm: Mapping[str, Any], exp: Expectations) -> CheckResult:
    """At least ``nodetune_min_shm`` free on the shm mount: NCCL's shared-memory transport
    and DataLoader workers allocate there, so a large but full mount is as bad as a small one."""
    name = "software.shm"
    size, free = shm.get("bytes"), shm.get("free")
    expected = f">= {human(exp.min_shm)} free"
    if not isinstance(size, int) or not isinstance(free, int):
        return failed(name, "absent", expected, exp.min_shm_source,
                      f"{SHM} cannot be read ({shm.get('error', 'no size or free space')})")
    measured = f"{human(free)} free of {human(size)}"
    if free < exp.min_shm:
        why = (f"{SHM} is {human(size)}" if size < exp.min_shm
               else f"{SHM} has {human(free)} free of {human(size)}: remove what fills it")
        return failed(name, measured, expected, exp.min_shm_source,
                      f"{why}; NCCL's shared-memory transport and DataLoader workers run out "
                      f"there; give the container --shm-size or set {VAR_MIN_SHM}")
    return passed(name, measured, expected, exp.min_shm_source)
