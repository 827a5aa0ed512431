"""Run the one-node all_reduce (check ``gpu.allreduce``) with validate's plan and launcher.

One host, one rank per GPU, the same worker and nccl-tests-like timing as
``validate``; :mod:`nodetune.check.nccl` picks the pass mark and judges.
"""

from __future__ import annotations

from nodetune.ansible.inventory import Host
from nodetune.check import nccl
from nodetune.check.expect import VAR_ALLREDUCE_MIN, Expectations
from nodetune.check.gpu import SmiLog
from nodetune.check.model import CheckResult, failed, skipped
from nodetune.check.probe import Probe
from nodetune.errors import ExitCode, NodetuneError
from nodetune.validate import plan as vplan
from nodetune.validate.launch import run_pair
from nodetune.validate.result import SizeResult

SMALLEST = "64M"  # the sizes the goal against nccl-tests is set at (>= 64 MiB)


def pass_mark(smi: SmiLog, exp: Expectations) -> tuple[float | None, str, int]:
    """(min busbw GB/s, its source, the largest size to measure)."""
    gpus = len(smi.gpus)
    profile = nccl.profile_for(smi.gpus[0].product, gpus, named=exp.allreduce_profile)
    largest = profile.at_bytes if profile else 1 << 30
    if exp.allreduce_min is not None:
        return exp.allreduce_min, VAR_ALLREDUCE_MIN, largest
    if profile is not None:
        return profile.min_busbw_gbps, f"profile {profile.name}: {profile.source}", largest
    return None, f"no profile for {gpus}x {smi.gpus[0].product}", largest


def run(host: Host, probe: Probe, smi: SmiLog | None, exp: Expectations, *, enabled: bool,
        timeout: float, accept_new_host_keys: bool) -> tuple[CheckResult,
                                                              tuple[SizeResult, ...]]:
    """Measure and judge the all_reduce across ``host``'s GPUs, or say why not.

    A measurement that cannot run (the worker dies, a rank hangs) fails the
    check with the reason: the node could be reached, so the fault is the node's.
    """
    gpus = len(smi.gpus) if smi else 0
    if (skip := nccl.not_applicable(gpus)) is not None:
        return skip, ()
    if not enabled:
        return skipped(nccl.NAME, "turned off (--skip-allreduce)"), ()
    torch = probe.torch or {}
    if not torch.get("nccl_available") or torch.get("error"):
        return skipped(nccl.NAME, "no torch with NCCL on this node (software.torch, "
                       "software.nccl)"), ()
    assert smi is not None
    low, source, largest = pass_mark(smi, exp)
    sizes = exp.allreduce_sizes or f"{SMALLEST}:{largest}"
    options = vplan.Options(backend="nccl", sizes=sizes, nproc_per_node=gpus, timeout=timeout,
                            accept_new_host_keys=accept_new_host_keys)
    try:
        m = run_pair(vplan.plan_node(host, options))
    except NodetuneError as exc:
        if exc.exit_code == ExitCode.BAD_INPUT:
            raise
        return failed(nccl.NAME, "not measured", f">= {low:g} GB/s" if low else "a sweep",
                      source, f"the all_reduce across {gpus} GPUs did not complete: "
                      f"{exc.message}"), ()
    return nccl.judge(m.sizes, gpus=gpus, min_busbw=low, min_source=source), m.sizes
