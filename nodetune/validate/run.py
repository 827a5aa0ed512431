"""One validation end to end: choose the pair, measure, read the transport, judge."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from nodetune.errors import InputError
from nodetune.inventory import Inventory
from nodetune.validate import nccl_log, plan, thresholds
from nodetune.validate.launch import Measurement, Progress, run_pair
from nodetune.validate.result import EXPECT_CHOICES, PairResult, Transport, evaluate

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Validation:
    """The judged result and the raw measurement behind it."""

    result: PairResult
    measurement: Measurement


def validate_pair(inventory: Inventory, options: plan.Options, *,
                  progress: Progress = lambda _e: None) -> Validation:
    """Validate the first two hosts of ``inventory`` (already narrowed by ``--limit``).

    Raises:
        InputError: bad options or inventory variables (exit 2).
        SSHError, LaunchError: a node cannot be reached or run the worker (exit 3).
        TimeoutError_: a phase stalled (exit 4).
    """
    options.check()
    pair = plan.select_pair(inventory)
    master_vars = pair.master.vars
    profile = options.profile or _str(master_vars.get(plan.VAR_PROFILE))
    threshold = thresholds.resolve(cli_min=options.min_busbw,
                                   inventory_min=master_vars.get(plan.VAR_MIN_BUSBW),
                                   profile=profile)
    expect = (options.expect_transport or _str(master_vars.get(plan.VAR_EXPECT)) or "any").lower()
    if expect not in EXPECT_CHOICES:
        raise InputError(f"expected transport {expect!r}: choose one of "
                         + ", ".join(EXPECT_CHOICES))
    options = dataclasses.replace(options, profile=profile, expect_transport=expect)
    m = run_pair(pair, options, progress=progress)
    transport = transport_of(m)
    verdict, reasons, notes = evaluate(m.sizes, transport, threshold=threshold, expect=expect)
    modes = sorted({s.launch for s in m.sizes})
    if modes:
        notes += ("timed ops issued " + " and ".join(
            "as one CUDA graph replay per size" if mode == "graph" else "eagerly, one call each"
            for mode in modes),)
    if pair.skipped:
        notes += (f"not validated (beyond the first two hosts): {', '.join(pair.skipped)}",)
    result = PairResult(
        hosts=(pair.master.name, pair.other.name), backend=m.backend,
        nproc_per_node=m.nproc_per_node, world=m.world, sizes=m.sizes, transport=transport,
        verdict=verdict, reasons=reasons, notes=notes, threshold=threshold,
        expect_transport=expect, phases_s={k: round(v, 3) for k, v in m.phases_s.items()},
    )
    return Validation(result, m)


def transport_of(m: Measurement) -> Transport:
    """What carried the all_reduce: parsed from NCCL's log, or gloo's TCP interfaces."""
    if m.backend == "gloo":
        ifaces = tuple(dict.fromkeys(
            env.get("GLOO_SOCKET_IFNAME", "?") for env in m.env.values()))
        return Transport.gloo(ifaces)
    lines = [ln for host_lines in m.logs.values() for ln in host_lines if "NCCL" in ln]
    parsed = nccl_log.parse(lines)
    largest = max((s.bytes for s in m.sizes), default=0)
    forced = {env.get("NCCL_ALGO") for env in m.env.values()} - {None}
    return Transport.from_nccl(parsed, largest=largest,
                               forced_algo=",".join(sorted(str(f) for f in forced)) or None)


def _str(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
