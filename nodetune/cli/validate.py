"""`nodetune validate`: two-node all_reduce measured like nccl-tests, with a verdict."""

from __future__ import annotations

import functools
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from nodetune.ansible import selection
from nodetune.cli import (
    fleet_view,
    input_opts,
    pair_view,
    rdma_view,
    report_opts,
    slurm_opts,
    slurm_view,
    target_opts,
)
from nodetune.cli.common import RecordedVerb, record
from nodetune.cli.console import err_console
from nodetune.cli.validate_help import EPILOG
from nodetune.collective.plan import Options
from nodetune.errors import InputError
from nodetune.fleet import verb as fleet_verb
from nodetune.fleet.run import FleetOptions
from nodetune.measure import thresholds
from nodetune.measure.protocol import COLLECTIVES
from nodetune.validate import inputs
from nodetune.validate import verb as pair_verb


@click.command("validate", cls=RecordedVerb, epilog=EPILOG)
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("-l", "--limit", metavar="PAT",
              help="Ansible pattern picking the two hosts (default: first two of gpu_nodes).")
@target_opts.extra_vars_option
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto",
              show_default=True, help="auto: nccl when both nodes have GPUs, else gloo.")
@click.option("--sizes", metavar="MIN:MAX[:F]|A,B",
              help="Message sizes, x4 steps like all_reduce_perf -b/-e/-f "
                   "[default: 1M:1G on GPUs, 1M:64M on CPU].")
@click.option("--iters", type=click.IntRange(1), default=20, show_default=True,
              help="Back-to-back all_reduce ops per timed round. A size gets one round, "
                   "more (up to 9) while they take under 0.1 s in all; the median round "
                   "is reported.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Untimed ops per size before the timed ones.")
@click.option("--launch", type=click.Choice(["auto", "graph", "eager"]), default="auto",
              show_default=True,
              help="How the timed ops are issued. graph: captured once in a CUDA graph and "
                   "replayed, so torch's per-call CPU cost (10-25 us) does not hide small-message "
                   "latency; eager: one Python call per op. auto: graph with NCCL, eager with "
                   "gloo, eager if capture fails.")
@click.option("--collective", type=click.Choice(list(COLLECTIVES)), default="all_reduce",
              show_default=True,
              help="What is timed, as nccl-tests' <collective>_perf times it, busbw with its "
                   "bus factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall "
                   "(n-1)/n. Profiles and the inventory's pass mark are all_reduce numbers: "
                   "another collective is judged by --min-busbw.")
@click.option("--nproc-per-node", type=click.IntRange(1), metavar="N",
              help="Ranks per node [default: GPUs per node, 1 on CPU].")
@click.option("--min-busbw", type=float, metavar="GBPS",
              help="Fail if busbw at the largest size is below this (GB/s).")
@click.option("--profile", type=click.Choice(sorted(thresholds.PROFILES)), metavar="NAME",
              help="Named threshold (listed below) with its source.")
@click.option("--expect-transport", type=click.Choice(["ib", "socket", "any"]),
              help="Fail unless NCCL used this network (ib includes RoCE), over a data "
                   "interface that is not the one SSH uses [default: any].")
@click.option("--master-addr", metavar="A",
              help="Address node rank 1 uses to reach node rank 0 [default: its ansible_host].")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              metavar="S", help="Seconds each phase (connect, launch, each size) may take "
                                "without progress before everything is stopped (exit 4).")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys not yet in known_hosts (changed keys still fail).")
@click.option("--partners", metavar="PAT",
              help="Known-good nodes (Ansible pattern over gpu_nodes, or the group -e "
                   "nodetune_hosts names, ignoring --limit): each node --limit selects is "
                   "tested against one of them in round 1, so a bad repaired node is named in "
                   "one round. Hosts outside that group are refused (exit 2).")
@click.option("--parallel", type=click.IntRange(1), metavar="K",
              help="Fleet: at most K pairs at once [default: every pair of a round].")
@click.option("--pairing", type=click.Choice(["random", "same", "cross"]), default="random",
              show_default=True,
              help="Fleet round 1: random, or by --pairing-key: same (within a rack/leaf) or "
                   "cross (across racks, to test the spine).")
@click.option("--pairing-key", metavar="VAR",
              help="Inventory variable to pair by (e.g. rack), with --pairing same|cross.")
@click.option("--seed", type=int, help="Fleet: seed of the random pairing (repeatable runs; "
                                       "the seed used is in the report).")
@click.option("--plan", "plan_only", is_flag=True,
              help="Print round 1's pairs (with --partners: who tests whom) and exit 0 "
                   "without connecting to anything (Slurm included).")
@click.option("--skip-checks", is_flag=True,
              help="Fleet: skip `nodetune check` before pairing (a preflight still finds "
                   "unreachable nodes and nodes without python/torch).")
@click.option("--all", "all_nodes", is_flag=True,
              help="One all_reduce across every selected node (one job-wide group, which "
                   "loads the spine) instead of pairs; a FAIL leaves every node unresolved.")
@click.option("--rdma-bw", is_flag=True,
              help="Then ib_write_bw per RDMA port ACTIVE on both nodes; below 0.9 x "
                   "the slower end's rate: both nodes unresolved, exit 1.")
@click.option("--image", metavar="IMAGE",
              help="Run the worker in this image on every node, as training jobs run; "
                   "its container is checked first (docs/validate.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), metavar="PATH",
              help="Also write report.json to PATH.")
@slurm_opts.slurm_options
@slurm_opts.busy_option
@slurm_opts.launcher_options
@input_opts.input_options
@report_opts.report_options
@report_opts.regression_options
@click.pass_context
def validate_cmd(ctx: click.Context, /, inventory: Path, limit: str | None,
                 extra_vars: tuple[str, ...], backend: str,
                 sizes: str | None, iters: int, warmup: int, launch: str, collective: str,
                 nproc_per_node: int | None,
                 min_busbw: float | None,
                 profile: str | None, expect_transport: str | None, master_addr: str | None,
                 timeout: float, accept_new_host_keys: bool, partners: str | None,
                 parallel: int | None, pairing: str, pairing_key: str | None, seed: int | None,
                 plan_only: bool, skip_checks: bool, all_nodes: bool, rdma_bw: bool,
                 image: str | None, as_json: bool,
                 report_path: Path | None, **slurm_kw: Any) -> None:
    """Measure all_reduce between two nodes over SSH and pass or fail the pair; on more
    than two nodes, name every node good or bad.

    Logs into both nodes and uploads a small worker, which imports torch once,
    answers a probe, then forks the node's ranks (static rendezvous); times
    all_reduce the way nccl-tests' all_reduce_perf does (warmup, barrier,
    back-to-back ops, mean over ranks), median of several timed rounds.
    Correctness is checked at every size; the transport NCCL chose (IB, RoCE,
    Socket, GDRDMA) is read from its INFO log.
    """
    options = Options(
        backend=backend, sizes=sizes, iters=iters, warmup=warmup, launch=launch,
        nproc_per_node=nproc_per_node, min_busbw=min_busbw, profile=profile,
        expect_transport=expect_transport, master_addr=master_addr, timeout=timeout,
        accept_new_host_keys=accept_new_host_keys, collective=collective, rdma_bw=rdma_bw,
        image=image,
    )
    slurm_options = slurm_opts.options_from(slurm_kw)
    launcher = slurm_opts.launcher_from(slurm_kw)
    vault, strict_vars = input_opts.options_from(slurm_kw)
    chosen = selection.select(inventory, verb="validate", limit=limit, extra_vars=extra_vars,
                              vault=vault, strict=strict_vars)
    inv = chosen.inventory
    if all_nodes:
        _refuse_fleet_options(ctx)
    group: inputs.Group = "all" if all_nodes else (
        "fleet" if len(inv.hosts) > 2 or partners or plan_only else "pair")
    planned = inputs.checked(inv, options, group=group, launcher=launcher)
    base: dict[str, Any] = {"inventory": str(inventory), "limit": limit,
                            "options": asdict(options), "unknown_vars": chosen.warnings()}
    slurm_say = (lambda _m: None) if as_json else slurm_view.say
    settled = functools.partial(slurm_view.show, quiet=as_json)
    if planned is None:
        fleet_options = FleetOptions(seed=seed, parallel=parallel, pairing=pairing,
                                     pairing_key=pairing_key, skip_checks=skip_checks)
        fleet = fleet_verb.run(fleet_verb.Request(
            inventory=inv, options=options, partners=partners, pattern=chosen.pattern,
            plan_only=plan_only, fleet=fleet_options,
            slurm=slurm_options, regression=report_opts.regression_policy(), base=base,
            report_path=report_path, launcher=launcher), record=record(ctx),
            listen=fleet_verb.Listener(
                progress=(lambda _n, _m: None) if as_json else fleet_view.progress,
                result=(lambda _r: None) if as_json else fleet_view.render,
                slurm=slurm_say, settled=settled))
        if fleet.result is None and not as_json:
            fleet_view.render_plan(fleet.plan)
        _finish(fleet.doc, fleet.record, fleet.code, as_json=as_json)
    pair = pair_verb.run(pair_verb.Request(
        inventory=inv, plan=planned, slurm=slurm_options,
        regression=report_opts.regression_policy(), base=base, report_path=report_path,
        launcher=launcher, all_nodes=all_nodes), record=record(ctx), listen=pair_verb.Listener(
            event=pair_view.Printer(quiet=as_json),
            result=(lambda _r: None) if as_json else pair_view.render,
            slurm=slurm_say, settled=settled,
            rdma_progress=(lambda _m: None) if as_json else rdma_view.progress,
            rdma=(lambda _r: None) if as_json else rdma_view.render))
    _finish(pair.doc, pair.record, int(pair.code), as_json=as_json)


# Options of a fleet of pairs, which one job-wide group (--all) has no use for.
FLEET_ONLY = {"partners": "--partners", "plan_only": "--plan", "rdma_bw": "--rdma-bw",
              "parallel": "--parallel", "pairing": "--pairing", "pairing_key": "--pairing-key",
              "seed": "--seed", "skip_checks": "--skip-checks"}


def _refuse_fleet_options(ctx: click.Context) -> None:
    """--all with an option only a fleet of pairs reads: exit 2 naming the option(s)."""
    given = [flag for name, flag in FLEET_ONLY.items()
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    if given:
        raise InputError(f"--all is one group of every selected node: {', '.join(given)} "
                         "only applies to a fleet of pairs (--rdma-bw: ib_write_bw runs "
                         "between pairs); drop it or drop --all")


def _finish(doc: dict[str, Any], path: Path, code: int, *, as_json: bool) -> NoReturn:
    report_opts.show_regressions(doc)
    slurm_view.show_teardown(doc)
    slurm_view.show_recheck(doc)
    if not as_json:
        err_console.print(f"run record: {path.parent}")
    raise SystemExit(code)
