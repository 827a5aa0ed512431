"""`nodetune check`: per-node health checks, a node x check table, verdicts."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from nodetune.action import Action
from nodetune.check import CheckOptions
from nodetune.check import verb as check_verb
from nodetune.check.model import NodeChecks, Status
from nodetune.cli import input_opts, matrix, report_opts, slurm_opts, target_opts
from nodetune.cli.common import RecordedVerb, err_console, out_console, record
from nodetune.errors import NodetuneError
from nodetune.verdicts import NodeState, worst_first

EPILOG = f"""\b
Examples:
  nodetune check inventory/prod
  nodetune check inventory/prod --limit 'gpu-a0*' --json > check.json
  nodetune check inventory/gpu-local          # ansible_connection: local

\b
Checks (each: pass, warn, fail, skip or unknown: its tool hung or crashed; with
measured and expected values, the source of the expectation and, when it fails, the
action: none < re-run < reset-gpu < restart-fabric-manager < reboot < service):
  gpu.count        GPUs the driver sees = nodetune_expected_gpus; none missing from the PCI bus
  gpu.driver       running driver = nvidia_driver_version (warns if only the role default pins it)
  gpu.persistence  persistence mode on (nvidia_driver_persistenced)
  gpu.ecc          Azure NHC limits: no pending/failed row remap, <= 512 remapped rows,
                   no SRAM uncorrectable, SRAM correctable <= 10000, DRAM <= 20000000
  gpu.pcie         link gen and width at their maximum
  gpu.clocks       no HW slowdown / HW thermal / power brake (SW thermal warns)
  gpu.nvlink       every NVLink up, same count on every GPU
  gpu.retired_pages SBE+DBE retired pages < 63, none pending, DBE <= 15 (DCGM's limits);
                   GPUs that remap rows instead (A100, H100, H200): skip
  software.torch   nodetune_python imports torch (skipped when nodetune_python is unset)
  software.cuda    torch's CUDA <= the CUDA version the driver supports
  software.nccl    torch.distributed.is_nccl_available(), with NCCL's version
  software.shm     free space in /dev/shm >= nodetune_min_shm (default 1G: NCCL asks --shm-size=1g)
  fabric.rdma[D/P] RDMA port ACTIVE/LinkUp at nodetune_expected_rdma_rate_gbps
                   (default: the node's fastest port)
  fabric.mtu[IF]   MTU = what net_mtu_interfaces sets (drift since the last apply); a request
                   that selects no interface here fails (warns: net_mtu_allow_absent_nics)
  fabric.nccl[K]   NCCL_SOCKET_IFNAME / NCCL_IB_HCA in the node's /etc/nccl.conf and in the
                   inventory name interfaces / RDMA ports the node has, by NCCL's rules (^ = and
                   prefixes, NAME:PORT) (warns: nccl_config_allow_absent_nics)
  fabric.sysctl[K] sysctl = net_sysctl_settings + _overrides + congestion control
  fabric.roce[IF]  trust/PFC/RDMA-CM ToS = what roce_qos sets
  fabric.roce_cc[IF] DCQCN reaction and notification points on (ecn/roce_rp, roce_np) for
                   roce_qos_ecn_priorities; --read-ppcc: the PPCC register too (mlxreg --get)
  gpu.xid          no Xid in the kernel log since boot or the node's last clean gpu.xid that
                   NVIDIA's Xid catalogue says needs a GPU reset, reboot or RMA (app Xids warn)
  gpu.sxid         no fatal NVSwitch SXid in the kernel log over gpu.xid's window (non-fatal
                   warns; DCGM's NVSwitch health watch); no NVSwitch: skip
  gpu.imex         nvidia-imex-ctl -N -j: IMEX domain UP, every node READY (DOWN fails);
                   no nvidia-imex-ctl: skip ("no IMEX on this node")
  gpu.fabric       NVLink fabric Completed/Success; NVSwitch boards: nvidia-fabricmanager
                   active at the driver's version (Fabric Manager User Guide)
  gpu.kernel_module module flavour = nvidia_driver_kernel_modules; nvidia_peermem loaded
                   where the node has RDMA ports (nvidia_driver_peermem_enabled)
  fabric.rdma_errors[D/P] sysfs port error counters < 10 (infiniband-diags ibcheckerrs);
                   no link_downed / link_error_recovery since the node's previous check
  gpu.nvlink_errors[N] per link since the node's previous check: no new replay/recovery
                   error, CRC < nodetune_nvlink_crc_errors_per_s (default 100/s; fewer warn)
                   (DCGM's NVLink health limits); no NVLink: skip
  dcgm.diag        dcgmi diag -r --dcgm-level -j: every test passes (skips without DCGM)
  gpu.pcie_acs     no ACS SrcValid+ on a PCIe bridge between a GPU and a NIC (NCCL guide)
  node.time_sync   clock offset from chrony (chronyc -n -c tracking) or systemd-timesyncd
                   (timedatectl timesync-status) <= nodetune_max_clock_offset_ms (default
                   100 ms); not synchronised warns; neither tool: skip
  node.global_env  NCCL_*/CUDA_* set host-wide (/etc/environment, /etc/profile.d/*.sh, the
                   systemd manager environment): an NCCL value that differs from
                   /etc/nccl.conf or the inventory's nccl_config fails (the environment wins
                   over nccl.conf); any other warns
  fleet.versions   with 2+ nodes: kernel, driver, CUDA, GPU VBIOS, torch, NCCL, HCA
                   firmware and OFED/DOCA agree with the other nodes (a node off the
                   majority warns, naming its value and theirs); HCA firmware other than
                   nodetune_expected_firmware fails (one node too); a node's GPUs on
                   different VBIOS warn
  container.*      with --image: the image is on the node (or pulled: container.image), and
                   its container, started as validate --image starts it, has /dev/shm >=
                   nodetune_min_shm, the node's RDMA devices and libibverbs (where it has
                   RDMA), torch, and the node's NCCL (container.shm/rdma/libibverbs/torch/nccl)
  fabric.rdma_bw[D] with --rdma-peer: ib_write_bw per ACTIVE port (and --use_cuda) >= 0.9 x
                   the port rate (Azure NHC check_ib_bw_gdr: 180 Gb/s on HDR 200)
  gpu.allreduce    nodes with >= 2 GPUs: an all_reduce across them (validate's worker, one
                   rank per GPU, 64M up to the profile's size); no wrong value, busbw at the
                   largest size >= nodetune_check_min_busbw_gbps or the profile's pass mark
                   (Azure NHC 8x H200 431, 8x H100 460 at 16G; 8x A100 228 at 8G; 4x H200
                   NV18 326.6 at 4G, 0.9 x nccl-tests measured)
  nccl.effective   the same run's NCCL INIT,ENV log: every NCCL_* value nccl_config and
                   nodetune_env set was used by NCCL (fails naming the value NCCL used and
                   its source; warns where NCCL logged no ENV line)
Expectations are the roles' defaults under the inventory's group_vars/host_vars,
as `nodetune apply` would use them. Hosts: those of gpu_nodes (or
-e nodetune_hosts=GROUP) under --limit, as for every verb; a missing or
empty group is refused (exit 2).

\b
Inventory variables read (besides the roles'):
  nodetune_expected_gpus            GPUs each node must have
  nodetune_min_shm                  smallest /dev/shm, e.g. 1G (default 1G)
  nodetune_expected_rdma_rate_gbps  rate every RDMA port must reach, e.g. 400
  nodetune_python                   the node's python with torch
  nodetune_check_min_busbw_gbps     one-node all_reduce pass mark (GB/s at the largest size)
  nodetune_check_profile            one-node profile by name (default: by GPU model and count)
  nodetune_check_sizes              one-node all_reduce sizes, e.g. 64M:16G
  nodetune_max_clock_offset_ms      node.time_sync's limit in ms (default 100)
  nodetune_env                      environment for the all_reduce (NCCL_*)
  nodetune_kernel_log               kernel log source, /dev/kmsg format (default /dev/kmsg)
  nodetune_rdma_sysfs               RDMA sysfs class dir (default /sys/class/infiniband)
  nodetune_pci_sysfs                PCI devices dir for GPUs' AER (default /sys/bus/pci/devices)
  nodetune_hca_pcie_speed_fails     HCA PCIe link below max speed fails (default false: warns)
  nodetune_pcie_aer_correctable_per_hour  correctable AER errors/h per function to warn (60)
  nodetune_expected_firmware        HCA firmware (fw_ver) every HCA runs, e.g. 28.43.2026, or a
                                    mapping of HCA names (globs) to versions
  nodetune_nvlink_crc_errors_per_s  NVLink CRC errors/s on a link that fail (100, DCGM's)
  ansible_python_interpreter        python that runs the probe (default python3)

\b
--launcher slurm: every node checks itself (nodetune-healthcheck --report, from
the slurm_healthcheck role) in one srun step of one exclusive salloc of the
nodes, run from nodetune_slurm_controller; no SSH to the nodes; the same report.
With --image, the container.* checks follow in the same allocation, in the
image through pyxis or Slurm's OCI support (nodetune_container_runtime).
--drain drains no node for the image's faults (container.*): such a node is
skipped, saying so; a node's own faults in the same run still drain it.

\b
Exit: 0 no check failed (warnings allowed), 1 a check failed, 2 bad input
(nothing is contacted), 3 a node could not be reached or probed, 4 a node timed out,
5 nothing failed but a check could not be assessed (not drained without --drain-unknown).

{slurm_opts.HELP}
{slurm_opts.BUSY_HELP}
{input_opts.HELP}
{report_opts.HELP}"""


STYLE = {Status.FAIL: "bold red", Status.WARN: "yellow", Status.PASS: "green",
         Status.SKIP: "dim", Status.UNKNOWN: "bold magenta"}
VERDICT_STYLE = {NodeState.BAD: "bold red", NodeState.UNREACHABLE: "bold red",
                 NodeState.UNRESOLVED: "yellow", NodeState.NOT_ASSESSED: "bold magenta",
                 NodeState.GOOD: "green"}


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
              read_ppcc: bool, accept_new_host_keys: bool, image: str | None, as_json: bool,
              **slurm_kw: Any) -> None:
    """Check each node on its own: GPUs, software alignment, fabric drift.

    Runs one read-only probe per node, in parallel, over SSH (or locally for
    ansible_connection: local): nvidia-smi -q -x, sysfs, /proc/sys, /dev/shm,
    mlnx_qos, and torch through nodetune_python. Nothing is written to the
    nodes. Failures first; a node with a failed check is bad.
    """
    base: dict[str, Any] = {"inventory": str(inventory), "limit": limit,
                            "options": {"timeout": timeout, "parallel": parallel,
                                        "allreduce": not skip_allreduce,
                                        "dcgm_level": dcgm_level, "rdma_peer": rdma_peer,
                                        "read_ppcc": read_ppcc,
                                        "accept_new_host_keys": accept_new_host_keys,
                                        "image": image}}
    rec = record(ctx)
    try:
        options = CheckOptions(timeout=timeout, parallel=parallel, allreduce=not skip_allreduce,
                               accept_new_host_keys=accept_new_host_keys,
                               dcgm_level=dcgm_level, rdma_peer=rdma_peer, image=image,
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
            progress=_progress(as_json), result=(lambda _r: None) if as_json else render,
            slurm=(lambda _m: None) if as_json else slurm_opts.say,
            settled=functools.partial(slurm_opts.show, quiet=as_json)))
    slurm_opts.show_teardown(outcome.doc)
    slurm_opts.show_recheck(outcome.doc)
    if not as_json:
        err_console.print(f"run record: {outcome.record.parent}")
    raise SystemExit(int(outcome.code))


def _progress(quiet: bool):  # type: ignore[no-untyped-def]
    def show(node: str, message: str) -> None:
        if not quiet:
            err_console.print(f"[cyan]{'check':>9}[/] {escape(node)}: {escape(message)}")
    return show


def _group(name: str) -> str:
    return name.split("[", 1)[0]


def _worst(statuses: list[Status]) -> Status:
    return min(statuses, key=lambda s: s.order) if statuses else Status.SKIP


def render(results: Mapping[str, NodeChecks]) -> None:
    """The node x check table (worst nodes first), the failures and warnings, the verdicts."""
    verdicts = {n: c.verdict() for n, c in results.items()}
    order = [v.node for v in worst_first(verdicts)]
    groups = list(dict.fromkeys(_group(r.name) for c in results.values() for r in c.results))
    cells = []
    for node in order:
        checks = results[node]
        if not checks.reachable:
            cells.append(["[bold red]-[/]"] * (len(groups) + 1))
            continue
        row = []
        for g in groups:
            status = _worst([r.status for r in checks.results if _group(r.name) == g])
            row.append(f"[{STYLE[status]}]{status.value}[/]")
        action = checks.action  # the node's: the highest of its checks' (nodetune.action)
        row.append(f"[bold]{action.value}[/]" if action is not Action.NONE else action.value)
        cells.append(row)
    for part in matrix.tables(order, [*matrix.headings(groups), "action"], cells,
                              width=out_console.width):
        out_console.print(part)
    findings = [(node, r) for node in order
                for r in sorted(results[node].results, key=lambda r: r.status.order)
                if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]
    if findings:
        out_console.print("\n[bold]findings[/]")
    for node, r in findings:
        out_console.print(f"  [{STYLE[r.status]}]{r.status.value.upper()}[/] {escape(node)} "
                          f"[bold]{escape(r.name)}[/]: {escape(r.measured)}, expected "
                          f"{escape(r.expected)} [dim]from {escape(r.source)}[/]")
        out_console.print(f"       {escape(r.message)}")
        if r.recommended is not Action.NONE:
            out_console.print(f"       action: [bold]{r.recommended.value}[/] "
                              f"({escape(r.recommended.words)})")
    skips: dict[tuple[str, str], list[str]] = {}
    for node in order:
        for r in results[node].results:
            if r.status is Status.SKIP:
                skips.setdefault((_group(r.name), r.message), []).append(node)
    if skips:
        out_console.print("\n[bold]skipped[/]")
        for (group, why), nodes in skips.items():
            names = sorted(set(nodes))
            out_console.print(f"  {escape(group)}: {escape(why)} "
                              f"[dim]({escape(', '.join(names))})[/]")
    out_console.print("\n[bold]verdicts[/]")
    for node in order:
        v = verdicts[node]
        act = f" [bold]action {v.action.value}[/]:" if v.action not in (None, Action.NONE) \
            else ""
        out_console.print(f"  {escape(node)}: [{VERDICT_STYLE[v.state]}]{v.state.value}[/]"
                          f"{act} {escape(v.reason)}")
