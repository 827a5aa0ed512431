"""The validate verb on two hosts: Slurm before and after, the record, history, the exit code.

The CLI parses options and prints what :class:`Listener` tells it; this module
decides and runs, and never prints or exits. A fleet (more than two hosts) is
:mod:`nodetune.fleet.verb`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible.inventory import Inventory
from nodetune.collective.launch import ValidateEvent
from nodetune.collective.plan import Plan
from nodetune.errors import ExitCode, InputError, NodetuneError
from nodetune.measure import thresholds
from nodetune.measure.result import CheckResult
from nodetune.remote.executor import blamed_host, left_alone
from nodetune.reports import history
from nodetune.reports import model as report_model
from nodetune.slurm import act as slurm_act
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm import recheck
from nodetune.slurm.allocation import Held
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions
from nodetune.validate import nccl_json, rdma
from nodetune.validate.launcher import launched, run_seconds
from nodetune.validate.result import PairResult, Verdict, good_nodes, node_marks
from nodetune.validate.run import validate_planned
from nodetune.verdicts import NodeVerdict, group_verdicts


def _ignore(_value: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Listener:
    """What a caller hears while a run goes on; every part is optional."""

    event: Callable[[ValidateEvent], None] = _ignore       # connect, launch, each size
    result: Callable[[PairResult], None] = _ignore          # the judged pair, before Slurm
    slurm: Callable[[str], None] = _ignore                  # each scontrol action
    settled: Callable[[slurm_act.Settled], None] = _ignore  # what Slurm did
    # --rdma-bw: each ib_write_bw run as it starts, then every node's results
    rdma_progress: Callable[[str], None] = _ignore
    rdma: Callable[[Mapping[str, Sequence[CheckResult]]], None] = _ignore


@dataclass(frozen=True, slots=True)
class Request:
    """One validate run as the options asked for it, its inputs checked and its plan made
    (:func:`~nodetune.validate.inputs.checked`)."""

    inventory: Inventory
    plan: Plan                                              # the pair's, or --all's group's
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    regression: history.RegressionPolicy | None = None
    base: Mapping[str, Any] = field(default_factory=dict)   # what report.json starts with
    report_path: Path | None = None                         # --report: a copy of report.json
    launcher: AllocOptions | None = None                    # --launcher slurm (None: ssh)
    all_nodes: bool = False                                 # --all: one group of every host


@dataclass(frozen=True, slots=True)
class Outcome:
    """The judged pair, its record, and the run's exit code."""

    result: PairResult
    doc: dict[str, Any]
    code: ExitCode
    record: Path


def run(request: Request, *, record: records.RunRecord,
        listen: Listener = Listener()) -> Outcome:
    """Ask Slurm (busy nodes), measure and judge the pair, drain/resume, compare with
    history, write the run record.

    Raises:
        InputError, SSHError, LaunchError, NodeTimeout: as :func:`validate_planned`, after the
            record is written (and, unless the input was bad, Slurm has acted on it).
    """
    inv, planned, options = request.inventory, request.plan, request.plan.options
    hosts = tuple(n.host for n in planned.nodes)
    base = {**request.base, "group": "all" if request.all_nodes else "pair"}
    held = Held(launcher="ssh" if request.launcher is None else "slurm")
    prepared = slurm_prepare.Prepared()  # nothing decided yet
    try:  # a refusal before the run (busy nodes, no controller) writes this run's record too
        # --launcher slurm: its controller and names, checked before anything runs
        prepared = slurm_prepare.prepare(inv, hosts, request.slurm, busy=hosts,
                                         launcher=None if request.launcher is None else hosts)
        with launched(hosts, request.launcher, held=held, progress=listen.slurm,
                      run_s=run_seconds(options), timeout_s=options.timeout,
                      image=options.image, slurm_plan=prepared.launcher) as alloc:
            validation = validate_planned(planned, progress=listen.event, alloc=alloc)
    except NodetuneError as exc:
        _record_failure(exc, request, prepared, held=held, base=base, record=record,
                        listen=listen)
        raise
    result = validation.result
    started = validation.measurement.launch
    code = ExitCode.OK if result.verdict is Verdict.PASS else ExitCode.CHECK_FAILED
    verdicts = group_verdicts(result.hosts, passed=result.verdict is Verdict.PASS,
                              reason="; ".join(result.reasons))
    bw: dict[str, list[CheckResult]] = {}
    if options.rdma_bw and not request.all_nodes:
        bw = rdma.measure_or_fail(hosts[0], hosts[1], timeout=options.timeout,
                                  accept_new_host_keys=options.accept_new_host_keys,
                                  progress=listen.rdma_progress,
                                  expect_transport=options.expect_transport)
        verdicts = rdma.apply_verdicts(verdicts, bw, pair=True)
        if any(rdma.failed_reason(n, rows) for n, rows in bw.items()):
            code = ExitCode.CHECK_FAILED
    # A job Slurm started on a node during the measurement makes it no verdict: the
    # pair's (the group's) nodes are unresolved, and neither drained nor resumed.
    rechecked: dict[str, Any] = {}
    # Over SSH nothing holds the nodes: Slurm is asked again after the measurement.
    verdicts, no_verdict = _recheck(verdicts, result.hosts, recheck.watch(prepared), rechecked)
    doc = {**rechecked, **base, "status": result.verdict.value, "exit_code": int(code),
           "result": result.to_dict(),
           # nccl-tests -J's "results", for scripts written against its JSON output
           "results": nccl_json.results(result, iters=options.iters),
           "nodes": {n: v.to_dict() for n, v in verdicts.items()},
           "master": f"{started.plan.master_addr}:{started.port}",
           "env": {h: dict(e) for h, e in started.env.items()}, **held.doc(),
           # per node: the values NCCL used and their sources (nccl_effective.py)
           **({"nccl_effective": result.nccl_effective} if result.nccl_effective else {})}
    if validation.measurement.containers:
        doc["container"] = validation.measurement.containers
    if options.rdma_bw and not request.all_nodes:
        doc["rdma_bw"] = rdma.section(bw)
        doc.update(rdma.note_section(bw))
        doc["status"] = "pass" if code is ExitCode.OK else "fail"
    if no_verdict:  # no pass, no fail: history keeps no such run as a measurement
        code = ExitCode.CHECK_FAILED
        doc.update(status="unresolved", exit_code=int(code))
    doc.update(thresholds.reference_section(report_model.profile_name(doc)))
    listen.result(result)
    if options.rdma_bw:
        listen.rdma(bw)
    if prepared.plan is not None:
        marks = node_marks([result], verdicts, good=good_nodes(verdicts),
                           rdma_bw=options.rdma_bw and not request.all_nodes,
                           rdma_measured=rdma.measured_nodes(bw))
        settled = slurm_act.settle(prepared.plan, verdicts, run=record, doc=doc,
                                   progress=listen.slurm, marks=marks, held=no_verdict)
        listen.settled(settled)
        if settled.failed:
            code = ExitCode.INFRASTRUCTURE
            doc["exit_code"] = int(code)
    if request.regression is not None:
        code = ExitCode(history.judge(doc, records.runs_dir(), request.regression,
                                      exit_code=int(code)))
    path = record.write(doc, files=records.node_logs(validation.measurement.logs),
                        copy_to=request.report_path)
    return Outcome(result=result, doc=doc, code=code, record=path)


def _record_failure(exc: NodetuneError, request: Request, prepared: slurm_prepare.Prepared,
                    *, held: Held, base: Mapping[str, Any], record: records.RunRecord,
                    listen: Listener) -> None:
    """A run that ended in ``exc``: let Slurm act on what it says of the nodes (as
    ``prepared`` decided; nothing where the refusal came before it had), then write the
    record."""
    slurm_plan, watched = prepared.plan, recheck.watch(prepared)
    failed = exc.exit_code == ExitCode.CHECK_FAILED  # --image: the container's checklist
    doc = {**base, "status": "fail" if failed else "error", "exit_code": int(exc.exit_code),
           "error": {"type": type(exc).__name__, "host": exc.host, "message": exc.message},
           **held.doc(), **(exc.sections or {})}
    # Bad input (an interface the inventory names but a node lacks, a bad nodetune_env)
    # measured nothing and changes nothing: no node is drained for it; nor is one for
    # an allocation Slurm did not grant (nothing ran on a node).
    refused = request.launcher is not None and held.alloc is None
    if slurm_plan is not None and not isinstance(exc, InputError) and not refused:
        names = tuple(slurm_plan.names)
        verdicts = group_verdicts(names, passed=None, reason=exc.message,
                                  culprit=blamed_host(exc, names))
        verdicts, no_verdict = _recheck(verdicts, names, watched, doc)
        listen.settled(slurm_act.settle(slurm_plan, verdicts, run=record, doc=doc,
                                        progress=listen.slurm,
                                        held={**(left_alone(exc, names) or {}),
                                              **no_verdict}))
    record.write(doc, copy_to=request.report_path)


def _recheck(verdicts: Mapping[str, NodeVerdict], hosts: Sequence[str],
             watched: recheck.Watch | None, doc: dict[str, Any]
             ) -> tuple[dict[str, NodeVerdict], dict[str, str]]:
    """Ask Slurm again after the measurement (into ``doc["slurm_recheck"]``): a job it
    started on a node of the pair (the group) meanwhile makes every node of it unresolved,
    for Slurm to leave alone."""
    arrived = recheck.recheck(watched)
    if watched is not None:
        doc["slurm_recheck"] = arrived.to_dict()
    return recheck.disturbed(verdicts, [tuple(hosts)], arrived)
