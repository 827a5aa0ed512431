"""`nodetune check`: per-node health checks, a node x check table, verdicts."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

from nodetune.check import CheckOptions
from nodetune.check import verb as check_verb
from nodetune.check.sample import seconds_of
from nodetune.cli import (
    check_view,
    input_opts,
    report_opts,
    slurm_opts,
    slurm_view,
    target_opts,
)
from nodetune.cli.check_help import EPILOG
from nodetune.cli.common import RecordedVerb, record
from nodetune.cli.console import err_console
from nodetune.errors import NodetuneError


@click.command("check", cls=RecordedVerb, epilog=EPILOG)
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("-l", "--limit", metavar="PAT", help="Only hosts matching this Ansible pattern.")
@target_opts.extra_vars_option
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              metavar="S", help="Seconds a node may take to answer (exit 4 past it).")
@click.option("--parallel", type=click.IntRange(1, 512), default=32, show_default=True,
              metavar="N", help="Nodes checked at once.")
@click.option("--skip-allreduce", is_flag=True,
              help="Skip the one-node all_reduce on nodes with 2 or more GPUs.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), default=1, show_default=True,
              metavar="N", help="dcgmi diag -r N where DCGM is installed: 1 quick, 2 medium "
              "(~2 min), 3 long (~15 min), 4 extended; raise --timeout to match; 0 skips it.")
@click.option("--rdma-peer", metavar="HOST",
              help="Measure fabric.rdma_bw: ib_write_bw from each node's ACTIVE RDMA ports to "
              "HOST (one of the hosts checked), and GPU memory to GPU memory where "
              "nvidia_peermem is loaded.")
@click.option("--read-ppcc", is_flag=True,
              help="fabric.roce_cc: also read each RoCE port's PPCC register (congestion "
                   "control in the firmware) with mlxreg --get, an access register read.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys not yet in known_hosts (changed keys still fail).")
@click.option("--image", metavar="IMAGE",
              help="Also check this training image on each node (container.* checks below; "
                   "runtime and shm size from the nodetune_container_* variables).")
@click.option("--sample", metavar="DURATION",
              help="Also read each node once a second for DURATION (10s, 2m; 1 s to 10 min): "
              "clock slowdowns, PCIe link flaps, RDMA port, AER and NVLink error rates.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@slurm_opts.slurm_options
@slurm_opts.drain_unknown_option
@slurm_opts.drain_reboot_option
@slurm_opts.busy_option
@slurm_opts.launcher_options
@input_opts.input_options
@report_opts.report_options
@click.pass_context
def check_cmd(ctx: click.Context, /, inventory: Path, limit: str | None,
              extra_vars: tuple[str, ...], timeout: float,
              parallel: int, skip_allreduce: bool, dcgm_level: int, rdma_peer: str | None,
              read_ppcc: bool, accept_new_host_keys: bool, image: str | None,
              sample: str | None,
              as_json: bool, **slurm_kw: Any) -> None:
    """Check each node on its own: GPUs, software alignment, fabric drift.

    Runs one read-only probe per node, in parallel, over SSH (or locally for
    ansible_connection: local): the GPUs through NVML (nvidia-smi -q -x where NVML
    is missing or fails), nvidia-smi nvlink -s -e, sysfs, /proc/sys, /dev/shm,
    mlnx_qos, and torch through nodetune_python. Nothing is written to the
    nodes. Failures first; a node with a failed check is bad.
    """
    base: dict[str, Any] = {"inventory": str(inventory), "limit": limit,
                            "options": {"timeout": timeout, "parallel": parallel,
                                        "allreduce": not skip_allreduce,
                                        "dcgm_level": dcgm_level, "rdma_peer": rdma_peer,
                                        "read_ppcc": read_ppcc,
                                        "accept_new_host_keys": accept_new_host_keys,
                                        "image": image, "sample": sample}}
    rec = record(ctx)
    try:
        options = CheckOptions(timeout=timeout, parallel=parallel, allreduce=not skip_allreduce,
                               accept_new_host_keys=accept_new_host_keys,
                               dcgm_level=dcgm_level, rdma_peer=rdma_peer, image=image,
                               sample=None if sample is None else seconds_of(sample),
                               read_ppcc=read_ppcc)
        options.check()
        slurm_options = slurm_opts.options_from(slurm_kw)
        launcher = slurm_opts.launcher_from(slurm_kw)
        vault, strict_vars = input_opts.options_from(slurm_kw)
    except NodetuneError as exc:  # bad options: recorded with what was asked
        rec.write({**base, "status": "error", "exit_code": int(exc.exit_code),
                   "error": {"type": type(exc).__name__, "host": exc.host,
                             "message": exc.message}})
        raise
    outcome = check_verb.run(check_verb.Request(
        inventory=inventory, options=options, limit=limit, extra_vars=extra_vars, vault=vault,
        strict_vars=strict_vars, slurm=slurm_options, base=base, launcher=launcher),
        record=rec,
        listen=check_verb.Listener(
            progress=check_view.progress(as_json),
            result=(lambda _r: None) if as_json else check_view.render,
            slurm=(lambda _m: None) if as_json else slurm_view.say,
            settled=functools.partial(slurm_view.show, quiet=as_json)))
    slurm_view.show_teardown(outcome.doc)
    slurm_view.show_recheck(outcome.doc)
    if not as_json:
        err_console.print(f"run record: {outcome.record.parent}")
    raise SystemExit(int(outcome.code))
