"""One planned pair's validation as a unit: measure it, judge it.

:func:`~nodetune.collective.plan.plan_pair` may run for many pairs before any node is
touched, so that every input error surfaces first; :func:`validate_planned` then
measures and judges one. The caller writes the run record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nodetune.collective import datapath
from nodetune.collective.launch import Measurement, OnValidateEvent, run_pair
from nodetune.collective.plan import Plan
from nodetune.errors import ExitCode
from nodetune.measure import jitter, nccl_effective, nccl_log
from nodetune.slurm.allocation import Allocation
from nodetune.validate.result import PairResult, Transport, Verdict, evaluate
from nodetune.validate.slurm_pair import run_pair_slurm

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Validation:
    """The judged result and the raw measurement behind it."""

    result: PairResult
    measurement: Measurement

    @property
    def exit_code(self) -> ExitCode:
        """0 on PASS, 1 on FAIL."""
        return ExitCode.OK if self.result.verdict is Verdict.PASS else ExitCode.CHECK_FAILED


def validate_planned(planned: Plan, *, progress: OnValidateEvent = lambda _e: None,
                     alloc: Allocation | None = None) -> Validation:
    """Measure one planned pair and judge it: over SSH, or as a step of ``alloc``.

    Raises:
        SSHError, LaunchError: a node cannot be reached or run the worker (exit 3).
        NodeTimeout: a phase stalled (exit 4).
    """
    m = (run_pair(planned, progress=progress) if alloc is None
         else run_pair_slurm(planned, alloc, progress=progress))
    transport = transport_of(m)
    over_ssh = datapath.over_ssh_warning(transport.kind, transport.interfaces, m.launch.paths)
    verdict, reasons, notes = evaluate(m.sizes, transport, threshold=planned.threshold,
                                       expect=planned.expect_transport, over_ssh=over_ssh)
    notes += planned.notes + tuple(n for p in m.launch.paths for n in p.notes)
    modes = sorted({s.launch for s in m.sizes})
    if modes:
        notes += ("timed ops issued " + " and ".join(
            "as one CUDA graph replay per timed round" if mode == "graph"
            else "eagerly, one call each"
            for mode in modes),)
    effective, eff_warnings = effective_of(planned, m)
    pair = planned.pair
    if pair.skipped:
        notes += (f"not validated (beyond the first two hosts): {', '.join(pair.skipped)}",)
    result = PairResult(
        hosts=tuple(n.name for n in planned.nodes), backend=m.launch.backend,
        nproc_per_node=m.launch.nproc_per_node, world=m.world, sizes=m.sizes,
        transport=transport, verdict=verdict, reasons=reasons, notes=notes,
        threshold=planned.threshold, expect_transport=planned.expect_transport,
        phases_s={k: round(v, 3) for k, v in m.phases_s.items()},
        paths=m.launch.paths, warnings=((over_ssh,) if over_ssh else ()) + eff_warnings,
        collective=planned.options.collective,
        straggler=jitter.straggler([s.per_iter for s in m.sizes],
                                   hosts=tuple(n.name for n in planned.nodes),
                                   nproc_per_node=m.launch.nproc_per_node),
        nccl_effective=effective,
    )
    return Validation(result, m)


def effective_of(planned: Plan, m: Measurement
                 ) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    """Each node's effective NCCL configuration and its ``nccl.effective`` judgement, from
    the ranks' own log (:mod:`~nodetune.measure.nccl_effective`); none under gloo.

    A value NCCL did not use is a warning of the pair, not a failed pair: the measurement
    itself stands, and ``nodetune check`` (whose one-node sweep runs the same judgement)
    is what fails the node for it.
    """
    if m.launch.backend != "nccl":
        return {}, ()
    out: dict[str, dict[str, Any]] = {}
    warnings: tuple[str, ...] = ()
    for node in planned.nodes:
        doc, said = nccl_effective.assess(
            node.host, m.logs.get(node.name, ()), run_env=m.launch.env.get(node.name, {}),
            inventory_env=node.env)
        out[node.name] = doc
        warnings += said
    return out, warnings


def transport_of(m: Measurement) -> Transport:
    """What carried the all_reduce: parsed from NCCL's log, or gloo's TCP interfaces."""
    env = m.launch.env
    if m.launch.backend == "gloo":
        ifaces = tuple(dict.fromkeys(e.get("GLOO_SOCKET_IFNAME", "?") for e in env.values()))
        return Transport.gloo(ifaces)
    lines = [ln for host_lines in m.logs.values() for ln in host_lines if "NCCL" in ln]
    parsed = nccl_log.parse(lines)
    largest = max((s.bytes for s in m.sizes), default=0)
    forced = {e.get("NCCL_ALGO") for e in env.values()} - {None}
    return Transport.from_nccl(parsed, largest=largest,
                               forced_algo=",".join(sorted(str(f) for f in forced)) or None)
