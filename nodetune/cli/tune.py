"""`nodetune tune`: A/B-test NCCL settings on one pair; recommend nccl_config variables."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from nodetune.ansible import selection
from nodetune.cli import input_opts, slurm_opts, target_opts, tune_view
from nodetune.cli.common import RecordedVerb, record
from nodetune.cli.console import err_console
from nodetune.collective.plan import Options
from nodetune.tune import grid as grid_mod
from nodetune.tune import stats
from nodetune.tune import verb as tune_verb

EPILOG = """\b
Examples:
  nodetune tune inventory/prod --pair node-a,node-b
  nodetune tune inventory/prod --pair node-a,node-b --algo Ring --algo Tree \\
      --proto Simple --proto LL128 --cross --repeats 5 --write group_vars/gpu_nodes/nccl.yml
  nodetune tune inventory/prod --pair node-a,node-b --topo-file /opt/topo/ndv5.xml

\b
Each combination is one validate measurement with its NCCL_* variables added to the
ranks' environment; "default" is the nodes as they are (their /etc/nccl.conf and
nodetune_env). The runs go round-robin over the combinations, --repeats times, so
drift falls on all alike. A setting is recommended only when, at the largest size,
its slowest run beats the default's fastest by more than --min-gain percent, and it
is slower beyond the spread at no size; gloo reads no NCCL_* variable, so a gloo
run never recommends one. Nothing on the nodes changes: the recommendation is
printed as nccl_config variables (or written with --write) for apply to put into
/etc/nccl.conf. Exit 0 done, 2 bad input, 3 infrastructure, 4 timeout.
See docs/tune.md."""

VALUES = "Repeatable: each value is one alternative."


@click.command("tune", cls=RecordedVerb, epilog=EPILOG)
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("--pair", required=True, metavar="A,B", help="The two hosts to measure.")
@target_opts.extra_vars_option
@click.option("--algo", multiple=True, metavar="LIST",
              help="NCCL_ALGO value (Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, "
                   f"PAT, a list, or ^list). {VALUES}")
@click.option("--proto", multiple=True, metavar="LIST",
              help=f"NCCL_PROTO value (LL, LL128, Simple, a list, or ^list). {VALUES}")
@click.option("--min-nchannels", multiple=True, metavar="N",
              help=f"NCCL_MIN_NCHANNELS value (1-64). {VALUES}")
@click.option("--max-nchannels", multiple=True, metavar="N",
              help=f"NCCL_MAX_NCHANNELS value (1-64). {VALUES}")
@click.option("--buffsize", multiple=True, metavar="BYTES",
              help=f"NCCL_BUFFSIZE value (bytes, or 8M). {VALUES}")
@click.option("--topo-file", multiple=True, metavar="PATH",
              help="NCCL_TOPO_FILE value: a topology file on the nodes (checked there, "
                   f"read-only, before the runs). {VALUES}")
@click.option("--cross", is_flag=True,
              help="Every combination of the values [default: each value alone].")
@click.option("--repeats", type=click.IntRange(2), default=3, show_default=True,
              help="Runs of each combination (at least 2).")
@click.option("--min-gain", type=click.FloatRange(min=0), default=stats.DEFAULT_MIN_GAIN,
              show_default=True, metavar="PCT",
              help="How far beyond the default's fastest run a setting's slowest must be.")
@click.option("--write", "write_path", type=click.Path(path_type=Path), metavar="FILE",
              help="Write the recommended group_vars there (nothing when none is).")
@click.option("--force", is_flag=True, help="Let --write replace an existing file.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto",
              show_default=True, help="auto: nccl when both nodes have GPUs, else gloo.")
@click.option("--sizes", metavar="MIN:MAX[:F]|A,B",
              help="Message sizes, as validate's [default: 1M:1G on GPUs, 1M:64M on CPU].")
@click.option("--iters", type=click.IntRange(1), default=20, show_default=True,
              help="Ops per timed round, as validate's.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Untimed ops per size, as validate's.")
@click.option("--launch", type=click.Choice(["auto", "graph", "eager"]), default="auto",
              show_default=True, help="How the timed ops are issued, as validate's.")
@click.option("--nproc-per-node", type=click.IntRange(1), metavar="N",
              help="Ranks per node [default: GPUs per node, 1 on CPU].")
@click.option("--master-addr", metavar="A",
              help="Address node rank 1 uses to reach node rank 0 [default: its ansible_host].")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              metavar="S", help="Seconds each phase of a run may take without progress.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys not yet in known_hosts (changed keys still fail).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@slurm_opts.busy_option
@input_opts.input_options
@click.pass_context
def tune_cmd(ctx: click.Context, /, inventory: Path, pair: str, extra_vars: tuple[str, ...],
             algo: tuple[str, ...], proto: tuple[str, ...], min_nchannels: tuple[str, ...],
             max_nchannels: tuple[str, ...], buffsize: tuple[str, ...],
             topo_file: tuple[str, ...], cross: bool, repeats: int, min_gain: float,
             write_path: Path | None, force: bool, backend: str, sizes: str | None,
             iters: int, warmup: int, launch: str, nproc_per_node: int | None,
             master_addr: str | None, timeout: float, accept_new_host_keys: bool,
             as_json: bool, allow_busy: bool, **input_kw: Any) -> None:
    """A/B-test NCCL settings (NCCL_ALGO, NCCL_PROTO, channels, NCCL_BUFFSIZE,
    NCCL_TOPO_FILE) on one pair, measured the way validate measures, and recommend
    the one that beats the default beyond the spread as nccl_config variables."""
    grid = grid_mod.grid_from({
        "NCCL_ALGO": algo, "NCCL_PROTO": proto, "NCCL_MIN_NCHANNELS": min_nchannels,
        "NCCL_MAX_NCHANNELS": max_nchannels, "NCCL_BUFFSIZE": buffsize,
        "NCCL_TOPO_FILE": topo_file}, cross=cross)
    options = Options(backend=backend, sizes=sizes, iters=iters, warmup=warmup, launch=launch,
                      nproc_per_node=nproc_per_node, master_addr=master_addr, timeout=timeout,
                      accept_new_host_keys=accept_new_host_keys)
    options.check()
    vault, strict_vars = input_opts.options_from(input_kw)
    chosen = selection.select(inventory, verb="tune", extra_vars=extra_vars, vault=vault,
                              strict=strict_vars)
    inv = chosen.inventory
    base: dict[str, Any] = {"inventory": str(inventory), "options": asdict(options),
                            "unknown_vars": chosen.warnings(),
                            "grid": {k: list(v) for k, v in grid.values.items()},
                            "cross": cross}
    outcome = tune_verb.run(tune_verb.Request(
        inventory=inv, pair=pair, options=options, grid=grid, repeats=repeats,
        min_gain=min_gain, write=write_path, force=force, base=base,
        allow_busy=allow_busy),
        record=record(ctx), listen=tune_verb.Listener(
            start=(lambda _r: None) if as_json else tune_view.starting,
            run=(lambda _r: None) if as_json else tune_view.finished))
    if not as_json:
        tune_view.render(outcome)
        err_console.print(f"run record: {outcome.record.parent}")
    raise SystemExit(int(outcome.doc.get("exit_code", 0)))
