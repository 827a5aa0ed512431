"""The tune verb: A/B-test NCCL settings on one pair, measured as validate measures.

Each run is one validate measurement (:func:`~nodetune.collective.launch.run_pair`: connect,
upload the worker, probe, start the ranks, clean up) with the combination's NCCL_*
variables added to the ranks' environment only, in the order
:func:`~nodetune.tune.schedule.interleaved` gives. Nothing on a node changes: no Slurm
action, no file left (each run's temporary directory is removed as validate's is). The
recommendation (:mod:`~nodetune.tune.stats`) is printed as nccl_config variables and
written to ``--write`` only. The CLI parses and prints; this module never does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible.inventory import Inventory
from nodetune.collective import addresses
from nodetune.collective import plan as plan_mod
from nodetune.collective.launch import Measurement, ValidateEvent, run_pair
from nodetune.collective.plan import Options, Plan
from nodetune.errors import InputError, LaunchError, NodetuneError
from nodetune.measure.sweep import SizeResult
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm import recheck
from nodetune.slurm.model import SlurmOptions
from nodetune.tune import pair as pair_mod
from nodetune.tune import proof, schedule, snippet, stats
from nodetune.tune.grid import Combo, Grid
from nodetune.validate.run import transport_of


def _ignore(_value: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RunDone:
    """One finished run: its place in the order and what it measured."""

    index: int      # 1-based, of ``total``
    total: int
    repeat: int
    combo: Combo
    sizes: tuple[SizeResult, ...]
    error: str = ""     # the run failed: NCCL refused the setting


@dataclass(frozen=True, slots=True)
class Listener:
    """What a caller hears while ``tune`` runs; every part is optional."""

    start: Callable[[RunDone], None] = _ignore        # a run is about to start (no sizes yet)
    event: Callable[[ValidateEvent], None] = _ignore  # validate's progress inside a run
    run: Callable[[RunDone], None] = _ignore          # a run finished


@dataclass(frozen=True, slots=True)
class Request:
    """One tune run as the options asked for it (already checked)."""

    inventory: Inventory            # the verb's target group
    pair: str                       # --pair A,B
    options: Options                # validate's measurement options
    grid: Grid
    repeats: int = 3
    min_gain: float = stats.DEFAULT_MIN_GAIN
    write: Path | None = None
    force: bool = False
    base: dict[str, Any] = field(default_factory=dict)
    allow_busy: bool = False        # --allow-busy: measure nodes Slurm has given to jobs


@dataclass(frozen=True, slots=True)
class Outcome:
    """The judged combinations, the recommendation and the record."""

    judged: tuple[stats.Judged, ...]
    recommendation: stats.Recommendation
    snippet: str | None
    doc: dict[str, Any]
    record: Path


@dataclass(frozen=True, slots=True)
class Prepared:
    """Every input checked, nothing run yet."""

    plan: Plan
    combos: tuple[Combo, ...]
    order: tuple[schedule.Slot, ...]
    extra: dict[str, Any] | None  # None: the hosts' nccl_config_extra differ (withheld)
    withheld: str = ""            # why no snippet is offered
    watched: recheck.Watch | None = None  # the pair's nodes, asked about again at the end


def prepare(request: Request) -> Prepared:
    """Check every input before anything runs on a node (the topology files are looked at,
    read-only, last).

    Raises:
        InputError: a bad option, host, inventory variable, --write file or topology file,
            or a node Slurm has allocated to jobs (without ``allow_busy``).
        SlurmError: Slurm, where configured, cannot be asked.
        SSHError: a node cannot be reached to look for the topology file.
    """
    if request.repeats < schedule.MIN_REPEATS:
        raise InputError(f"--repeats {request.repeats}: at least {schedule.MIN_REPEATS}, so "
                         "that the runs have a spread")
    if request.write is not None:
        snippet.check_target(request.write, force=request.force)
    pair = pair_mod.select(request.inventory, request.pair)
    addresses.check_master_addrs(pair.hosts)
    # As validate: where Slurm is configured, a pair it has given to jobs is refused.
    slurm = SlurmOptions(allow_busy=request.allow_busy)
    prepared = slurm_prepare.prepare(request.inventory, pair.hosts, slurm, busy=pair.hosts)
    watched = recheck.watch(prepared)
    # The default is the nodes as configured: a profile's forced NCCL_ALGO=Ring (the
    # inventory's nodetune_validate_profile) would make it a setting of tune's own.
    plan = dataclasses.replace(plan_mod.plan_pair(pair, request.options), force_ring=False)
    extra, withheld = snippet.pair_extra([(h.name, h.vars) for h in pair.hosts],
                                         writing=request.write is not None)
    combos = request.grid.combos()
    pair_mod.check_topo_files(pair, request.grid.values.get("NCCL_TOPO_FILE", ()),
                              accept_new_host_keys=request.options.accept_new_host_keys,
                              timeout=request.options.timeout)
    return Prepared(plan, combos, schedule.interleaved(len(combos), request.repeats), extra,
                    withheld, watched)


def with_env(plan: Plan, combo: Combo) -> Plan:
    """``plan`` with the combination's variables added to both nodes' environment."""
    nodes = tuple(dataclasses.replace(n, env={**n.env, **dict(combo.env)}) for n in plan.nodes)
    return dataclasses.replace(plan, nodes=nodes)


def _run_doc(slot: schedule.Slot, combo: Combo, m: Measurement) -> dict[str, Any]:
    transport = transport_of(m)
    return {"repeat": slot.repeat, "combo": combo.name, "backend": m.launch.backend,
            "transport": transport.kind, "interfaces": list(transport.interfaces),
            "algorithm": transport.algorithm, "phases_s": {k: round(v, 3)
                                                          for k, v in m.phases_s.items()},
            "env": {h: dict(e) for h, e in m.launch.env.items()},
            "sizes": [dataclasses.asdict(s) for s in m.sizes]}


def _stop(exc: NodetuneError, combo: Combo, index: int, total: int, doc: dict[str, Any],
          runs: list[dict[str, Any]], logs: dict[str, str],
          record: records.RunRecord) -> NodetuneError:
    """The error that ends the tune, named by its run, after the record of the runs so far."""
    exc.message = f"{combo.name} (run {index} of {total}): {exc.message}"
    doc.update(status="error", exit_code=int(exc.exit_code), runs=runs,
               error={"type": type(exc).__name__, "host": exc.host, "message": exc.message})
    record.write(doc, files=logs)
    return exc


def _judge(combos: tuple[Combo, ...], measured: dict[Combo, list[tuple[SizeResult, ...]]],
           failed: dict[Combo, str], nccl_logs: dict[Combo, list[tuple[Any, Any]]], *,
           backend: str, min_gain: float) -> tuple[tuple[stats.Judged, ...],
                                                   stats.Recommendation]:
    """Every combination judged (in the grid's order) and the recommendation, with what
    NCCL's logs say of the values (:mod:`~nodetune.tune.proof`)."""
    judged = stats.judge_all({c: r for c, r in measured.items() if c not in failed},
                             min_gain=min_gain, backend=backend)
    judged = tuple(sorted((*judged, *(stats.Judged(c, (), "failed", None, why)
                                      for c, why in failed.items())),
                          key=lambda j: combos.index(j.combo)))
    # each combination proven once: the recommendation's reason reuses its winner's proof
    proofs: dict[Combo, proof.Proof] = {}
    if backend == "nccl":
        proofs = {j.combo: proof.prove(j.combo, nccl_logs[j.combo]) for j in judged}
        judged = tuple(_proved(j, proofs[j.combo]) for j in judged)
    rec = stats.recommend(judged, backend=backend, min_gain=min_gain)
    if rec.combo is not None:
        said = proofs[rec.combo].summary()
        rec = dataclasses.replace(rec, reason=f"{rec.reason}; {said}" if said else rec.reason)
    return judged, rec


def _proved(judged: stats.Judged, said: proof.Proof) -> stats.Judged:
    """``judged`` with what NCCL's log says of its values; a combination with a value NCCL
    did not use in any repeat (that run measured something else) is never recommended."""
    if judged.combo.is_default or judged.verdict == "failed":
        return judged
    if said.ignored:
        return dataclasses.replace(judged, verdict="not used by NCCL", note=said.summary(),
                                   nccl_used=said.to_dict())
    return dataclasses.replace(judged, nccl_used=said.to_dict())


def run(request: Request, *, record: records.RunRecord,
        listen: Listener = Listener()) -> Outcome:
    """Check the input, measure every combination ``repeats`` times interleaved, judge them
    against the default, write the run record (and ``--write``).

    Raises:
        InputError: bad input (exit 2), before anything runs.
        SSHError, LaunchError, NodeTimeout: a run failed (validate's exit codes), after the
            record of the runs so far is written; the error names the combination. A
            setting whose run fails to launch while the default ran (NCCL refused it) is
            judged ``failed`` instead, and the others go on.
    """
    prepared = prepare(request)
    combos, order = prepared.combos, prepared.order
    pair = prepared.plan.pair
    doc: dict[str, Any] = {
        **request.base, "pair": [pair.master.name, pair.other.name],
        "repeats": request.repeats, "min_gain_pct": request.min_gain,
        "combos": [{"combo": c.name, "env": dict(c.env)} for c in combos],
        "order": [combos[s.combo].name for s in order], "nodes_changed": "none"}
    measured: dict[Combo, list[tuple[SizeResult, ...]]] = {c: [] for c in combos}
    nccl_logs: dict[Combo, list[tuple[Any, Any]]] = {c: [] for c in combos}
    failed: dict[Combo, str] = {}
    backends: set[str] = set()
    runs: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    for index, slot in enumerate(order, start=1):
        combo = combos[slot.combo]
        if combo in failed:
            continue
        listen.start(RunDone(index, len(order), slot.repeat, combo, ()))
        try:
            m = run_pair(with_env(prepared.plan, combo), progress=listen.event)
        except LaunchError as exc:
            if combo.is_default:
                raise _stop(exc, combo, index, len(order), doc, runs, logs, record) from None
            # The default ran on these nodes: NCCL refused this setting (an algorithm
            # or protocol the pair cannot use). It is dropped; the others go on.
            where = f"{exc.host}: " if exc.host else ""
            failed[combo] = f"{where}{exc.message}"
            runs.append({"repeat": slot.repeat, "combo": combo.name, "error": failed[combo]})
            listen.run(RunDone(index, len(order), slot.repeat, combo, (), failed[combo]))
            continue
        except NodetuneError as exc:
            raise _stop(exc, combo, index, len(order), doc, runs, logs, record) from None
        measured[combo].append(m.sizes)
        nccl_logs[combo].append((m.logs, m.launch.env))
        backends.add(m.launch.backend)
        runs.append(_run_doc(slot, combo, m))
        logs.update(records.node_logs(m.logs, folder=f"run-{index:02d}"))
        listen.run(RunDone(index, len(order), slot.repeat, combo, m.sizes))
    backend = backends.pop() if len(backends) == 1 else "mixed backends"
    judged, rec = _judge(combos, measured, failed, nccl_logs, backend=backend,
                         min_gain=request.min_gain)
    # Over SSH nothing held the pair: a job Slurm started on either node while the runs
    # went on may have slowed some of them, so their comparison recommends nothing.
    arrived = recheck.recheck(prepared.watched)
    disturbed = [f"{n}: {why}" for n in (pair.master.name, pair.other.name)
                 if (why := arrived.why(n))]
    if prepared.watched is not None:
        doc["slurm_recheck"] = arrived.to_dict()
    if disturbed:
        rec = stats.Recommendation(None, f"no recommendation: {'; '.join(disturbed)}; the "
                                         "runs may have been disturbed")
    text = (snippet.group_vars(dict(rec.combo.env), prepared.extra, run_id=record.id)
            if rec.combo is not None and prepared.extra is not None else None)
    if text is not None and request.write is not None:
        snippet.write(request.write, text, force=request.force)
    doc.update(status="unresolved" if disturbed else "ok", exit_code=1 if disturbed else 0,
               backend=backend, runs=runs,
               judged=[j.to_dict() for j in judged], recommendation=rec.to_dict(),
               snippet=text, written=str(request.write) if text and request.write else None,
               snippet_withheld=prepared.withheld or None)
    path = record.write(doc, files=logs)
    return Outcome(judged=judged, recommendation=rec, snippet=text, doc=doc, record=path)
