"""Run the one-node all_reduce (check ``gpu.allreduce``) with :mod:`nodetune.collective`'s
plan and launcher.

One host, one rank per GPU, the same worker and nccl-tests-like timing as
``validate``; :mod:`nodetune.check.nccl` picks the pass mark and judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodetune.ansible.inventory import Host
from nodetune.check import nccl
from nodetune.check.expect import VAR_ALLREDUCE_MIN, Expectations
from nodetune.check.model import CheckResult, failed, skipped
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.probe import Probe
from nodetune.errors import ExitCode, NodetuneError
from nodetune.remote.executor import Command, NodeRunner

# the collective launcher, the worker protocol and results, and nccl.effective's judge are
# imported where a sweep runs: the state-only health check runs none and, started every
# HealthCheckInterval, pays for every module it imports.
if TYPE_CHECKING:
    from nodetune.collective.launch import Measurement
    from nodetune.measure.sweep import SizeResult

OFF = "turned off (--skip-allreduce)"  # the skip when not asked for
SMALLEST = "64M"  # the sizes the goal against nccl-tests is set at (>= 64 MiB)


def pass_mark(smi: SmiLog, exp: Expectations) -> tuple[float | None, str, int]:
    """(min busbw GB/s, its source, the largest size to measure)."""
    return _pass_mark(smi.gpus[0].product, len(smi.gpus), exp)


def _pass_mark(product: str, gpus: int, exp: Expectations) -> tuple[float | None, str, int]:
    profile = nccl.profile_for(product, gpus, named=exp.allreduce_profile)
    largest = profile.at_bytes if profile else 1 << 30
    if exp.allreduce_min is not None:
        return exp.allreduce_min, VAR_ALLREDUCE_MIN, largest
    if profile is not None:
        return profile.min_busbw_gbps, f"profile {profile.name}: {profile.source}", largest
    return None, f"no profile for {gpus}x {product}", largest


def _sizes(product: str, gpus: int, exp: Expectations) -> str:
    return exp.allreduce_sizes or f"{SMALLEST}:{_pass_mark(product, gpus, exp)[2]}"


def measure(host: Host, gpus: int, sizes: str, *, timeout: float,
            accept_new_host_keys: bool) -> Measurement:
    """One rank per GPU on ``host``, the collective worker and timing (validate's too).

    Raises:
        NodetuneError: the measurement did not complete.
    """
    from nodetune.collective import plan as cplan
    from nodetune.collective.launch import run_pair

    options = cplan.Options(backend="nccl", sizes=sizes, nproc_per_node=gpus, timeout=timeout,
                            accept_new_host_keys=accept_new_host_keys)
    return run_pair(cplan.plan_node(host, options))


@dataclass(frozen=True, slots=True)
class Early:
    """The all_reduce, measured for the probe's GPUs before the node's software is judged:
    its worker's import of torch is the node's only one (:func:`torch_of`)."""

    product: str
    gpus: int
    sizes: str
    measured: Measurement | None
    error: Exception | None = None   # why it could not be measured


def seen_gpus(node: NodeRunner, *, timeout: float) -> tuple[str, int] | None:
    """(the first GPU's product name, how many GPUs) from one quick ``nvidia-smi`` query,
    or None where it gives no answer: enough to tell whether the all_reduce will run (two
    or more GPUs), and so whether the probe may leave torch to its worker.

    It runs under coreutils' ``timeout``, which kills its whole process group (timeout(1):
    the command runs in timeout's own group, signalled as one): a hung nvidia-smi is not
    left running on the node when the launcher gives up on it."""
    limit = min(timeout, 30.0)
    res = node.run(Command(["timeout", "-s", "KILL", f"{limit:g}", "nvidia-smi",
                            "--query-gpu=name", "--format=csv,noheader"]), timeout=limit + 5)
    names = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    if res.exit_status != 0 or not names:
        return None
    return names[0], len(names)


def measure_first(host: Host, product: str, gpus: int, exp: Expectations, *, timeout: float,
                  accept_new_host_keys: bool) -> Early | None:
    """Measure the all_reduce across ``gpus`` GPUs of ``product`` now (None where one GPU
    needs none); a measurement that fails is kept as the error :func:`run` reports."""
    if nccl.not_applicable(gpus) is not None:
        return None
    sizes = _sizes(product, gpus, exp)
    try:
        return Early(product, gpus, sizes, measure(host, gpus, sizes, timeout=timeout,
                                                   accept_new_host_keys=accept_new_host_keys))
    except Exception as exc:  # reported where the measurement is used (:func:`run`)
        return Early(product, gpus, sizes, None, exc)


def torch_of(early: Early) -> dict[str, Any] | None:
    """torch's versions as the early run's worker read them on importing it (the probe's
    fields), or None where the run ended without that answer."""
    from nodetune.measure import protocol

    if early.measured is None:
        return None
    for lines in early.measured.logs.values():
        for line in lines:
            event = protocol.decode(line)
            if event is not None and event.get("event") == "probe" and event.get("torch"):
                return {"torch": event.get("torch"), "cuda": event.get("cuda"),
                        "nccl_available": bool(event.get("nccl_available")),
                        "nccl": event.get("nccl")}
    return None


def run(host: Host, probe: Probe, smi: SmiLog | None, exp: Expectations, *, enabled: bool,
        timeout: float, accept_new_host_keys: bool, early: Early | None = None
        ) -> tuple[CheckResult, tuple[SizeResult, ...]]:
    """Measure and judge the all_reduce across ``host``'s GPUs, or say why not
    (:func:`checks` without ``nccl.effective``)."""
    results, sizes = checks(host, probe, smi, exp, enabled=enabled, timeout=timeout,
                            accept_new_host_keys=accept_new_host_keys, early=early)
    return results[0], sizes


def checks(host: Host, probe: Probe, smi: SmiLog | None, exp: Expectations, *,
           enabled: bool, timeout: float, accept_new_host_keys: bool,
           early: Early | None = None
           ) -> tuple[tuple[CheckResult, ...], tuple[SizeResult, ...]]:
    """``gpu.allreduce``, and ``nccl.effective`` from the same run's NCCL log where the
    sweep completed (:mod:`nodetune.check.effective`), or say why not.

    ``early``: a measurement already made (:func:`measure_first`); it is used only where
    it is for the GPUs, sizes and torch this judgement finds, and otherwise set aside.

    A measurement that cannot run (the worker dies, a rank hangs) fails the
    check with the reason: the node could be reached, so the fault is the node's.
    """
    gpus = len(smi.gpus) if smi else 0
    if (skip := nccl.not_applicable(gpus)) is not None:
        return (skip,), ()
    if not enabled:
        return (skipped(nccl.NAME, OFF),), ()
    torch = probe.torch or {}
    if not torch.get("nccl_available") or torch.get("error"):
        return (skipped(nccl.NAME, "no torch with NCCL on this node (software.torch, "
                        "software.nccl)"),), ()
    assert smi is not None
    product = smi.gpus[0].product
    low, source, _largest = _pass_mark(product, gpus, exp)
    sizes = _sizes(product, gpus, exp)
    try:
        if early is not None and (early.product, early.gpus, early.sizes) == (product, gpus,
                                                                             sizes):
            if early.error is not None:
                raise early.error
            assert early.measured is not None
            m = early.measured
        else:
            m = measure(host, gpus, sizes, timeout=timeout,
                        accept_new_host_keys=accept_new_host_keys)
    except NodetuneError as exc:
        if exc.exit_code == ExitCode.BAD_INPUT:
            raise
        return (failed(nccl.NAME, "not measured", f">= {low:g} GB/s" if low else "a sweep",
                       source, f"the all_reduce across {gpus} GPUs did not complete: "
                       f"{exc.message}"),), ()
    return (nccl.judge(m.sizes, gpus=gpus, min_busbw=low, min_source=source),
            judge_effective(host, m)), m.sizes


def judge_effective(host: Host, m: Measurement) -> CheckResult:
    """``nccl.effective`` (:mod:`nodetune.check.effective`) of the sweep ``m`` on ``host``:
    its ranks' log, the environment the run set and the one the inventory asks for."""
    from nodetune.check import effective

    return effective.judge(host, m.logs.get(host.name, ()),
                           run_env=m.launch.env.get(host.name, {}),
                           inventory_env=m.launch.plan.nodes[0].env)
