"""`nodetune lab`: local podman nodes reachable over SSH, for trying nodetune without a cluster."""

from __future__ import annotations

from pathlib import Path

import click

from nodetune.cli.common import handle_errors, print_json
from nodetune.cli.console import err_console, out_console, table
from nodetune.lab import config as lab_config
from nodetune.lab import faults as lab_faults
from nodetune.lab import image as lab_image
from nodetune.lab import nodes as lab


def _say(message: str) -> None:
    err_console.print(f"[dim]lab:[/] {message}")


@click.group("lab")
def lab_group() -> None:
    """A local lab of podman containers that behave like cluster nodes.

    \b
    Each node runs systemd and sshd, has its own network namespace (own TCP
    sysctls and MTU) and is reachable over SSH with a key the lab generates.
    `lab up` writes inventory/lab/hosts.yml for every other verb.
    Needs root and podman (scripts/bootstrap.sh installs it).
    """


@lab_group.command("up")
@click.option("-n", "--nodes", type=int, metavar="N",
              help=f"Number of nodes [default: the nodes the lab has, {lab.DEFAULT_NODES} for a "
                   "new lab]. Fewer than it has needs --shrink.")
@click.option("--shrink", is_flag=True,
              help="Let --nodes remove the nodes beyond N (a Slurm lab's slurm.conf follows).")
@click.option("--base-image", metavar="IMAGE",
              help="Build the node image from a registry image (e.g. debian:12) instead of "
                   "debootstrap.")
@click.option("--rebuild", is_flag=True, help="Rebuild the node image first.")
@click.option("--with-torch", is_flag=True,
              help="Install a CPU torch (once, on a volume all nodes share) so that "
                   "`nodetune validate inventory/lab` can run; wheels come through this "
                   "machine's pip configuration.")
@click.option("--with-slurm", is_flag=True,
              help="Run a real Slurm (Debian's slurmctld on node 1, slurmd and munge on every "
                   "node) and set nodetune_slurm_controller, for --drain/--resume.")
@handle_errors
def up_cmd(nodes: int | None, shrink: bool, base_image: str | None, rebuild: bool,
           with_torch: bool, with_slurm: bool) -> None:
    """Start the lab (safe to run again: running nodes are kept).

    Without --nodes the lab keeps every node it has; --nodes N adds nodes up
    to N, and removes nodes only with --shrink.
    """
    if rebuild:
        lab_image.build_image(base_image=base_image, progress=_say, rebuild=True)
    st = lab.up(Path.cwd(), nodes=nodes, shrink=shrink, base_image=base_image,
                with_torch=with_torch, with_slurm=with_slurm, progress=_say)
    out_console.print(table(
        ["node", "address (eth0, SSH)", "fabric (eth1)", "state"],
        [[n.name, n.address or None, n.fabric_address or None, n.state] for n in st.nodes]))
    inv = st.inventory.parent.relative_to(Path.cwd()) if st.inventory else Path("inventory/lab")
    out_console.print(f"\ninventory: {inv}/hosts.yml\nnext: nodetune apply {inv}", markup=False)


@lab_group.command("image")
@click.option("--suite", "suites", multiple=True, type=click.Choice(lab_config.SUITES),
              help="Debian suite to build (repeatable); default: every suite the molecule "
                   f"scenarios test ({', '.join(lab_config.SUITES)}). "
                   f"Lab nodes run {lab_config.SUITE}.")
@click.option("--base-image", metavar="IMAGE",
              help="Start from a registry image (e.g. debian:12) instead of debootstrap; "
                   "needs exactly one --suite.")
@click.option("--rebuild", is_flag=True, help="Build again even if the image exists.")
@handle_errors
def image_cmd(suites: tuple[str, ...], base_image: str | None, rebuild: bool) -> None:
    """Build the node images localhost/nodetune-node:SUITE; reused once built.

    The lab's nodes use the bookworm image; the molecule scenarios use every suite's.
    """
    if base_image and len(suites) != 1:
        raise click.UsageError("--base-image builds one image: name its --suite")
    for suite in suites or lab_config.SUITES:
        image = lab_image.build_image(base_image=base_image, progress=_say, rebuild=rebuild,
                                      suite=suite)
        out_console.print(f"image {image}: ready", markup=False)


@lab_group.command("down")
@handle_errors
def down_cmd() -> None:
    """Remove every container, network, volume and key the lab made (the image is kept)."""
    removed = lab.down(Path.cwd(), progress=_say)
    out_console.print("removed: " + (", ".join(removed) if removed else "nothing (no lab)"),
                      markup=False)


@lab_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@handle_errors
def status_cmd(as_json: bool) -> None:
    """Show the lab's nodes, image and inventory."""
    st = lab.status(Path.cwd())
    if as_json:
        print_json({"image_present": st.image_present,
                    "inventory": str(st.inventory) if st.inventory else None,
                    "nodes": [{"name": n.name, "address": n.address,
                               "fabric_address": n.fabric_address, "state": n.state}
                              for n in st.nodes]})
        return
    if not st.nodes:
        out_console.print("no lab nodes (start them with `nodetune lab up`)", markup=False)
    else:
        out_console.print(table(
            ["node", "address (eth0, SSH)", "fabric (eth1)", "state"],
            [[n.name, n.address or None, n.fabric_address or None, n.state] for n in st.nodes]))
    built = "present" if st.image_present else "not built"
    out_console.print(f"image {lab_config.IMAGE}: {built}; "
                      f"inventory: {st.inventory or 'none'}", markup=False)


@lab_group.command("fault")
@click.argument("node")
@click.argument("kind", type=click.Choice(sorted(lab_faults.FAULTS)))
@click.option("--rate", metavar="RATE",
              help=f"slow-link: the rate limit [default: {lab_faults.DEFAULT_RATE}]; rdma-port: "
                   "what the stand-in ib_write_bw reports [default: 392gbit] (tc units: "
                   "50mbit, 1gbit).")
@click.option("--ofed-version", metavar="VERSION",
              help="ofed-version: what the stand-in `ofed_info -s` prints "
                   "[default: OFED-internal-25.10-1.7.1].")
@handle_errors
def fault_cmd(node: str, kind: str, rate: str | None, ofed_version: str | None) -> None:
    """Break lab node NODE for real, for fleet validation to find, or clear it.

    \b
    KIND:
      slow-link     tc token-bucket filter on the fabric interface eth1
                    (tc qdisc replace dev eth1 root tbf rate RATE burst 256kbit
                    latency 100ms); at 200mbit a gloo pair fails the lab-gloo profile
      sshd-stopped  systemctl stop ssh.service: the node is unreachable (exit 3)
      broken-torch  `import torch` fails in that node's Python only (a module
                    shadowing torch in its standard library directory)
      xid           an NVRM Xid 79 record in the node's stand-in kernel log
                    (/var/lib/nodetune-lab/kmsg, /dev/kmsg format)
      rdma-flap     a stand-in RDMA port mlx5_0/1 (under /var/lib/nodetune-lab/
                    infiniband), ACTIVE, link_downed past 10; again: one more flap
      rdma-port     a stand-in RDMA port mlx5_0/1, ACTIVE at 400 Gb/s, and a
                    stand-in ib_write_bw reporting RATE (for check --rdma-peer,
                    validate --rdma-bw)
      dcgm-fail     a stand-in dcgmi: `dcgmi diag -j` fails PCIe on GPU 1
      pcie-acs      a stand-in lspci: ACS SrcValid+ on a switch between GPU and NIC
      pcie-aer      a stand-in PCI tree (/var/lib/nodetune-lab/pci-devices): HCA
                    mlx5_0 trained at x8 of x16, AER counters; again: more errors
                    on its link, a non-fatal one among them
      clock-skew    a stand-in chronyc: tracking says 250 ms slow of NTP time
      global-env    NCCL_SOCKET_IFNAME=eth0 in /etc/environment (put back by clear)
      smi-hang      a stand-in nvidia-smi that never answers
      ofed-version  a stand-in ofed_info -s printing VERSION (--ofed-version)
      clear         undo every fault on the node
    \b
    Example:
      nodetune lab fault nodetune-lab-3 slow-link
      nodetune validate inventory/lab --profile lab-gloo   # names nodetune-lab-3 bad
      nodetune lab fault nodetune-lab-3 clear
      nodetune lab fault nodetune-lab-2 xid
      nodetune check inventory/lab --drain   # gpu.xid names nodetune-lab-2, drains it
      nodetune lab fault nodetune-lab-2 rdma-port --rate 120gbit  # and -1 rdma-port
      nodetune validate inventory/lab --rdma-bw   # fabric.rdma_bw names nodetune-lab-2
    """
    done = lab_faults.apply(node, kind, rate=rate, ofed_version=ofed_version)
    out_console.print(f"{node}: {done}", markup=False)
