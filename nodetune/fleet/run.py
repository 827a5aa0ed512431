"""A fleet validation end to end: select, check or preflight, plan, run rounds, judge."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible.inventory import Host, Inventory
from nodetune.check.model import CheckResult
from nodetune.collective import addresses, datapath, marks, plan, ras_ask
from nodetune.collective.plan import Options
from nodetune.errors import ExitCode, InputError, NodeTimeout, NodetuneError, SSHError
from nodetune.fleet import verdict
from nodetune.fleet.planner import (
    FleetSpec,
    Outcome,
    PairOutcome,
    PlannedPair,
    first_round,
    serial_tests,
)
from nodetune.fleet.schedule import FleetEvent, FleetRun, Schedule, run_rounds
from nodetune.measure.host_env import host_env, node_python
from nodetune.remote import ssh_executor
from nodetune.remote.executor import Command, NodeRunner
from nodetune.slurm.allocation import Allocation
from nodetune.validate import rdma
from nodetune.validate.result import PairResult, Verdict
from nodetune.validate.run import Validation, validate_planned
from nodetune.verdicts import NodeState, NodeVerdict

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class FleetOptions:
    """How to pair and run the fleet (the pair test itself is ``validate``'s ``Options``)."""

    seed: int | None = None
    parallel: int | None = None
    pairing: str = "random"
    pairing_key: str | None = None
    skip_checks: bool = False

    def check(self) -> None:
        """Raises InputError on values no run can use."""
        if self.parallel is not None and self.parallel < 1:
            raise InputError(f"--parallel {self.parallel}: must be >= 1")
        if self.pairing != "random" and not self.pairing_key:
            raise InputError(f"--pairing {self.pairing} needs --pairing-key VAR (an inventory "
                             "variable such as rack or leaf)")
        if self.pairing == "random" and self.pairing_key:
            raise InputError("--pairing-key needs --pairing same or --pairing cross")


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """Everything decided before any node is contacted."""

    spec: FleetSpec
    hosts: Mapping[str, Host]
    round_one: tuple[PlannedPair, ...]
    tests: int = 1  # the most pair tests one after another (:func:`serial_tests`)


@dataclass(frozen=True, slots=True)
class FleetResult:
    """Per-node verdicts, every pair run, and the exit code they give."""

    plan: FleetPlan
    verdicts: dict[str, NodeVerdict]
    outcomes: tuple[PairOutcome, ...]
    pair_results: Mapping[tuple[str, str, int], PairResult]
    exit_code: ExitCode
    pair_logs: Mapping[tuple[str, str, int], Mapping[str, Sequence[str]]] = field(
        default_factory=dict)
    interrupted: bool = False
    checks: Mapping[str, Any] = field(default_factory=dict)
    phases_s: Mapping[str, float] = field(default_factory=dict)
    # --rdma-bw: every node's fabric.rdma_bw results, from each pair it was in
    rdma_bw: Mapping[str, Sequence[CheckResult]] = field(default_factory=dict)
    # the nodes Slurm leaves alone, and why (:func:`~nodetune.fleet.verdict.image_held`)
    image_held: Mapping[str, str] = field(default_factory=dict)


def make_plan(inventory: Inventory, options: FleetOptions, *,
              partners: Inventory | None = None,
              pair_options: Options | None = None) -> FleetPlan:
    """Decide the nodes, their pairing keys and round 1, before connecting to anything.

    ``partners`` is the inventory narrowed by ``--partners``; the nodes under test
    are then the selection without them. With ``pair_options`` (the pair test's), every
    host is planned as node rank 0 of a pair, as any host may be in a later round, so that
    what a pair's plan reads from its rank 0 alone (pass mark, profile, expected
    transport) is checked for every host now, not when that pair is formed.

    Raises:
        InputError: bad options, a missing pairing key, or bad per-host variables (a
            partner's too: its master address, environment, data interface and, with
            ``pair_options``, everything :func:`~nodetune.collective.plan.plan_pair` reads).
    """
    options.check()
    hosts = list(inventory.hosts)
    partner_hosts = list(partners.hosts) if partners is not None else []
    partner_names = {h.name for h in partner_hosts}
    under_test = [h for h in hosts if h.name not in partner_names]
    if partners is not None and not partner_hosts:
        raise InputError(f"--partners matched no host in {inventory.source}")
    if not under_test:
        raise InputError("every selected host is a --partners node: nothing to test "
                         "(--limit picks the repaired nodes)")
    everyone = {h.name: h for h in (*under_test, *partner_hosts)}
    addresses.check_master_addrs(everyone.values())  # the partners' too
    for h in everyone.values():
        host_env(h)  # a bad nodetune_env stops the run before any node is touched
        datapath.request_for(h.name, h.vars)  # so does a malformed data interface
    if pair_options is not None:
        _plan_every_host(list(everyone.values()), pair_options)
    keys: dict[str, str] = {}
    if options.pairing_key:
        for h in under_test:
            value = h.vars.get(options.pairing_key)
            if value in (None, ""):
                raise InputError(f"--pairing-key {options.pairing_key}: the variable is not "
                                 "set for this host", host=h.name)
            keys[h.name] = str(value)
    if pair_options is not None:
        _transports_agree(list(everyone.values()), keys, options.pairing, pair_options)
    seed = options.seed if options.seed is not None else secrets.randbelow(1 << 31)
    spec = FleetSpec(nodes=tuple(h.name for h in under_test),
                     partners=tuple(h.name for h in partner_hosts),
                     pairing=options.pairing, keys=keys, seed=seed)
    return FleetPlan(spec=spec, hosts=everyone, round_one=first_round(spec),
                     tests=serial_tests(spec, options.parallel))


def _plan_every_host(hosts: Sequence[Host], options: Options) -> None:
    """Plan a pair of each host with itself, so that a bad input of any host stops the
    fleet before any node is contacted (two hosts' inputs that only clash with each other
    are :func:`_transports_agree`'s); the rounds plan each pair they form again
    (:func:`run_one_pair`), from inputs now known to be good.

    Raises:
        InputError: bad options, or the first host whose inputs no pair could be planned
            with, naming it (a threshold read from its variables names no host itself).
    """
    bare = Host(name="(no host variables)", groups=(), vars={})
    plan.plan_pair(plan.Pair(bare, bare), options)  # the options' own faults name no host
    for host in hosts:
        try:
            plan.plan_pair(plan.Pair(host, host), options)
        except InputError as exc:
            if exc.host is not None:
                raise
            raise InputError(exc.message, host=host.name) from None


def _transports_agree(hosts: Sequence[Host], keys: Mapping[str, str], pairing: str,
                      options: Options) -> None:
    """The hosts a round may pair expect one transport: with ``--pairing same`` those of
    one pairing key, else every host (the partners included).

    Raises:
        InputError: two hosts that may be paired expect different transports (naming
            both), before any node is contacted.
    """
    groups: dict[str, list[Host]] = {}
    for host in hosts:
        key = keys.get(host.name, "") if pairing == "same" and keys else ""
        groups.setdefault(key, []).append(host)
    for together in groups.values():
        marks.expected_transport(together, plan.asked(options))


Progress = Callable[[str, str], None]  # (node or "fleet", message)


def run_fleet(fleet: FleetPlan, options: FleetOptions, pair_options: Options, *,
              progress: Progress = lambda _n, _m: None,
              stop: threading.Event | None = None,
              alloc: Allocation | None = None) -> FleetResult:
    """Check (or preflight) every node, then run the rounds and judge every node. In a
    Slurm allocation (``alloc``) the pairs are its steps, and staging the worker on every
    node through it was the preflight: no SSH reaches a node.

    Never raises for a node's fault: an unreachable or broken node is a verdict.

    Raises:
        InputError: bad options (before any node is contacted).
    """
    pair_options.check()
    phases: dict[str, float] = {}
    t0 = time.monotonic()
    hosts = list(fleet.hosts.values())
    checks: dict[str, Any] = {}
    if alloc is not None:
        if not options.skip_checks:
            progress("fleet", "--launcher slurm: the per-node health checks are not run "
                     "(they go over SSH); the slurm_healthcheck role runs them on each node")
        pre = {h.name: NodeVerdict(h.name, NodeState.GOOD, f"preflight: worker staged by "
                                   f"Slurm job {alloc.job} on {alloc.names[h.name]}")
               for h in hosts}
    elif options.skip_checks:
        pre = preflight(hosts, pair_options, parallel=options.parallel, progress=progress)
    else:
        pre, checks = _checks(hosts, pair_options, options, progress)
    phases["checks" if not (options.skip_checks or alloc) else "preflight"] = (
        time.monotonic() - t0)
    excluded = {n: v for n, v in pre.items() if v.state is not NodeState.GOOD}
    spec = dataclasses.replace(
        fleet.spec, nodes=tuple(n for n in fleet.spec.nodes if n not in excluded),
        partners=tuple(p for p in fleet.spec.partners if p not in excluded))
    results: dict[tuple[str, str, int], PairResult] = {}
    logs: dict[tuple[str, str, int], Mapping[str, Sequence[str]]] = {}
    bw: dict[str, list[CheckResult]] = {}
    lock = threading.Lock()

    def runner(pair: PlannedPair, pair_stop: threading.Event) -> PairOutcome:
        outcome, validation = run_one_pair(pair, fleet.hosts, pair_options, pair_stop,
                                           progress, alloc=alloc)
        if validation is not None:
            with lock:
                results[(*pair.hosts, pair.round)] = validation.result
                logs[(*pair.hosts, pair.round)] = validation.measurement.logs
        if validation is not None and pair_options.rdma_bw and not pair_stop.is_set():
            a, b = (fleet.hosts[h] for h in pair.hosts)
            found = rdma.measure_or_fail(
                a, b, timeout=pair_options.timeout,
                accept_new_host_keys=pair_options.accept_new_host_keys,
                progress=lambda m: progress(f"{a.name}<->{b.name}", m),
                expect_transport=pair_options.expect_transport)
            with lock:
                for node, rows in found.items():
                    bw.setdefault(node, []).extend(rows)
        return outcome

    def on_event(event: FleetEvent) -> None:
        if event.kind == "round":
            progress("fleet", event.message)
        elif event.kind == "start" and event.pair is not None:
            progress("fleet", f"round {event.pair.round}: {event.message} ({event.pair.why})")
        elif event.outcome is not None and event.pair is not None:
            o = event.outcome
            progress("fleet", f"round {o.round}: {o.hosts[0]} <-> {o.hosts[1]}: "
                     f"{o.outcome.value}" + (f" ({o.reason})" if o.reason else ""))

    t0 = time.monotonic()
    run: FleetRun = run_rounds(spec, runner, Schedule(parallel=options.parallel),
                               on_event=on_event, stop=stop)
    phases["pairs"] = time.monotonic() - t0
    for number, secs in run.rounds_s.items():
        phases[f"round {number}"] = secs
    decisive = run.decisive()
    verdicts = rdma.apply_verdicts(verdict.decide(spec, decisive, preflight=excluded), bw)
    code = verdict.exit_code(verdicts, decisive)
    return FleetResult(plan=dataclasses.replace(fleet, spec=spec), verdicts=verdicts,
                       outcomes=tuple(run.outcomes), pair_results=results, exit_code=code,
                       pair_logs=logs,
                       interrupted=run.interrupted, checks=checks, rdma_bw=bw,
                       image_held=verdict.image_held(verdicts, run.outcomes),
                       phases_s={k: round(v, 3) for k, v in phases.items()})


class _Stopped(NodetuneError):
    """The fleet told this pair to stop (Ctrl-C or its wall-clock limit)."""


def run_one_pair(pair: PlannedPair, hosts: Mapping[str, Host], options: Options,
                 stop: threading.Event, progress: Progress, *,
                 alloc: Allocation | None = None) -> tuple[PairOutcome, Validation | None]:
    """One pair test through validate's own pair runner; its outcome as the planner reads it.

    The pair is planned from its two hosts (their inputs were checked when the fleet was
    planned, :func:`_plan_every_host`). The pair runner owns connect, launch, watch and
    cleanup; a stop request reaches it through its progress callback and it cleans up as
    it unwinds.
    """
    a, b = (hosts[h] for h in pair.hosts)

    def on_progress(event: Any) -> None:
        if stop.is_set():
            raise _Stopped("stopped by the fleet")
        if getattr(event, "size", None) is None and getattr(event, "phase", "") == "cleanup":
            progress(f"{a.name}<->{b.name}", str(getattr(event, "message", "")))

    try:
        validation = validate_planned(plan.plan_pair(plan.Pair(a, b), options),
                                      progress=on_progress, alloc=alloc)
    except _Stopped:
        return PairOutcome(pair.hosts, pair.round, Outcome.ERROR, "stopped"), None
    except NodeTimeout as exc:
        dead = tuple(h for h in ras_ask.from_sections(exc.sections) if h in pair.hosts)
        return PairOutcome(pair.hosts, pair.round, Outcome.TIMEOUT, str(exc),
                           image_fault=not exc.blames_node, dead=dead), None
    except SSHError as exc:
        down = (exc.host,) if exc.host in pair.hosts else ()
        return PairOutcome(pair.hosts, pair.round, Outcome.ERROR, str(exc),
                           unreachable=down), None
    except InputError:
        raise
    except NodetuneError as exc:  # a failed --image checklist keeps what it found
        return PairOutcome(pair.hosts, pair.round, Outcome.ERROR, str(exc), container=dict(
            (exc.sections or {}).get("container") or {}), image_fault=not exc.blames_node), None
    result = validation.result
    busbw = result.sizes[-1].busbw if result.sizes else None
    found = dict(validation.measurement.containers)
    if result.verdict is Verdict.PASS:
        return PairOutcome(pair.hosts, pair.round, Outcome.PASS, "", busbw,
                           container=found), validation
    return (PairOutcome(pair.hosts, pair.round, Outcome.FAIL, "; ".join(result.reasons), busbw,
                        container=found), validation)


def preflight(hosts: Sequence[Host], options: Options, *, parallel: int | None,
              progress: Progress) -> dict[str, NodeVerdict]:
    """Reach every node and import torch with its python: unreachable or bad, else good."""

    def one(host: Host) -> NodeVerdict:
        python = node_python(host)
        executor = None
        try:
            progress(host.name, f"preflight: connecting to {host.address}")
            executor = ssh_executor.connect(
                host, accept_new_host_keys=options.accept_new_host_keys,
                timeout=min(options.timeout, 30.0))
            res = NodeRunner(executor, host.name).run(
                Command((python, "-c", "import torch"), env=host_env(host)),
                timeout=options.timeout)
        except NodetuneError as exc:
            if exc.exit_code == ExitCode.BAD_INPUT:
                raise
            return NodeVerdict(host.name, NodeState.UNREACHABLE, f"preflight: {exc.message}")
        finally:
            if executor is not None:
                executor.close()
        if res.exit_status in (126, 127):
            return NodeVerdict(host.name, NodeState.BAD,
                               f"preflight: python {python!r} not found or not executable")
        if res.exit_status != 0:
            tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
            return NodeVerdict(host.name, NodeState.BAD,
                               f"preflight: torch is not importable by {python}: {tail}")
        return NodeVerdict(host.name, NodeState.GOOD, "preflight: reachable, torch imports")

    width = max(1, min(len(hosts), parallel or len(hosts), 32))
    with ThreadPoolExecutor(max_workers=width) as pool:
        return dict(zip((h.name for h in hosts), pool.map(one, hosts), strict=True))


def _checks(hosts: Sequence[Host], pair_options: Options, options: FleetOptions,
            progress: Progress) -> tuple[dict[str, NodeVerdict], dict[str, Any]]:
    """``nodetune check`` on every node first: a node failing its own checks is bad."""
    from nodetune.check.run import CheckOptions, check_nodes, node_verdicts

    results = check_nodes(hosts, CheckOptions(
        timeout=pair_options.timeout, accept_new_host_keys=pair_options.accept_new_host_keys,
        parallel=min(options.parallel or 32, 32)), progress=progress)
    verdicts = node_verdicts(results)
    out = {}
    for name, v in verdicts.items():
        if v.state is NodeState.BAD:
            out[name] = dataclasses.replace(v, reason=f"checks: {v.reason}")
        else:
            out[name] = v
    return out, {name: [r.to_dict() for r in c.results] for name, c in results.items()}
