"""The check verb: select the nodes, ask Slurm, check them, drain/resume, write the record.

The CLI parses options and prints what :class:`Listener` tells it; this module decides
and runs, and never prints or exits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible import selection
from nodetune.ansible.vault import NO_VAULT, Vault
from nodetune.check import versions
from nodetune.check.model import NodeChecks
from nodetune.check.run import CheckOptions, check_nodes, exit_code, node_verdicts, report_sections
from nodetune.check.slurm_launch import check_inputs, check_nodes_slurm
from nodetune.container import runtime as ct
from nodetune.errors import ExitCode, InputError, NodetuneError
from nodetune.remote import ssh_config
from nodetune.slurm import act as slurm_act
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm import recheck
from nodetune.slurm.allocation import Held
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions
from nodetune.slurm.policy import CheckMark


def _ignore(*_values: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Listener:
    """What a caller hears while a check runs; every part is optional."""

    progress: Callable[[str, str], None] = _ignore                  # (node, what)
    result: Callable[[Mapping[str, NodeChecks]], None] = _ignore    # before Slurm acts
    slurm: Callable[[str], None] = _ignore
    settled: Callable[[slurm_act.Settled], None] = _ignore


@dataclass(frozen=True, slots=True)
class Request:
    """One check run as the options asked for it."""

    inventory: Path
    options: CheckOptions
    limit: str | None = None
    extra_vars: tuple[str, ...] = ()
    vault: Vault = NO_VAULT
    strict_vars: bool = False
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    base: Mapping[str, Any] = field(default_factory=dict)
    launcher: AllocOptions | None = None   # --launcher slurm (None: ssh)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Every node's checks, the record and the run's exit code."""

    results: Mapping[str, NodeChecks]
    doc: dict[str, Any]
    code: ExitCode
    record: Path


def check_mark(checks: NodeChecks, options: CheckOptions) -> CheckMark:
    """What this run found on one node, for a resume (:class:`CheckMark`): the node's own
    checks (not the image's), and the active checks the options left out."""
    not_run = {name for name, off in (("gpu.allreduce", not options.allreduce),
                                      ("dcgm.diag", options.dcgm_level < 1),
                                      ("fabric.rdma_bw", options.rdma_peer is None)) if off}
    return CheckMark(results=tuple((r.name, r.status.value) for r in checks.own().results),
                     not_run=frozenset(not_run), dcgm_level=options.dcgm_level)


def run(request: Request, *, record: records.RunRecord,
        listen: Listener = Listener()) -> Outcome:
    """Check the selected nodes and write the run record, whatever ends the run.

    Raises:
        NodetuneError: bad input (exit 2, before any node is contacted) or a run that could
            not check at all, after the record is written.
    """
    base: dict[str, Any] = dict(request.base)
    held = Held(launcher="ssh" if request.launcher is None else "slurm")
    try:
        if request.launcher is not None and request.options.sample is not None:
            raise InputError("--sample reads each node over SSH for its window: it does not "
                             "run under --launcher slurm")
        chosen = selection.select(request.inventory, verb="check", limit=request.limit,
                                  extra_vars=request.extra_vars, vault=request.vault,
                                  strict=request.strict_vars)
        inv = chosen.inventory
        base["unknown_vars"] = chosen.warnings()
        ct.check_request(inv.hosts, request.options.image,  # --image: before any node
                         launcher="ssh" if request.launcher is None else "slurm")
        ssh_config.check_hosts(inv.hosts)  # what reaches the ssh_config: before any contact
        pins = {h.name: versions.pin(h) for h in inv.hosts}  # fleet.versions' pinned firmware
        # Over SSH the checks (the all_reduce, dcgmi diag, ib_write_bw) would compete with
        # a job: nodes Slurm has allocated are refused, as validate refuses them, and
        # asked about again after the run. --launcher slurm holds its own allocation.
        over_ssh = request.launcher is None
        if not over_ssh:
            check_inputs(inv.hosts, request.options)
        prepared = slurm_prepare.prepare(inv, inv.hosts, request.slurm,
                                         busy=inv.hosts if over_ssh else None,
                                         launcher=None if over_ssh else inv.hosts)
        watched = recheck.watch(prepared)
        if request.launcher is None:
            results = check_nodes(inv.hosts, request.options, progress=listen.progress)
        else:
            assert prepared.launcher is not None  # prepare resolved it, or raised
            results = check_nodes_slurm(prepared.launcher, inv.hosts, request.options,
                                        request.launcher, held=held, progress=listen.progress)
    except NodetuneError as exc:
        record.write({**base, "status": "error", "exit_code": int(exc.exit_code),
                      "error": {"type": type(exc).__name__, "host": exc.host,
                                "message": exc.message}, **held.doc()})
        raise
    # The nodes against each other: a node that runs other versions than its peers
    results, fleet = versions.agree(results, pins)
    code = exit_code(results)
    status = {ExitCode.OK: "pass", ExitCode.CHECK_FAILED: "fail",
              ExitCode.NOT_ASSESSED: "not_assessed"}.get(code, "error")
    doc = {**base, "status": status, "exit_code": int(code), **report_sections(results),
           **({"fleet": fleet} if fleet else {}), **held.doc()}
    # A node Slurm allocated while it was checked gives no verdict (nor does every node
    # that measured ib_write_bw against a --rdma-peer that was).
    arrived = recheck.recheck(watched)
    peer = request.options.rdma_peer
    groups = [(n,) if peer not in results or n == peer else (n, peer) for n in results]
    own, no_verdict = recheck.disturbed(
        node_verdicts({n: c.own() for n, c in results.items()}), groups, arrived)
    if watched is not None:
        doc["slurm_recheck"] = arrived.to_dict()
    if no_verdict:
        mine, _ = recheck.disturbed(node_verdicts(results), groups, arrived)
        doc["nodes"] = {n: mine[n].to_dict() for n in doc["nodes"]}
        if code is ExitCode.OK:
            code = ExitCode.CHECK_FAILED
            doc.update(status="unresolved", exit_code=int(code))
    listen.result(results)
    if prepared.plan is not None:
        # Slurm judges each node by its own checks: the image's faults (container.*) drain
        # none, and a node whose only faults they are is left alone, saying why.
        settled = slurm_act.settle(
            prepared.plan, own, run=record, doc=doc, progress=listen.slurm,
            held={**{n: why for n, c in results.items() if (why := c.image_fault())},
                  **no_verdict},
            marks={n: check_mark(c, request.options) for n, c in results.items()})
        listen.settled(settled)
        if settled.failed:
            code = ExitCode.INFRASTRUCTURE
            doc["exit_code"] = int(code)
    path = record.write(doc)
    return Outcome(results=results, doc=doc, code=code, record=path)
