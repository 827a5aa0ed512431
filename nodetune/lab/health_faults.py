"""Run-time faults on one lab node for `nodetune check` to find: an Xid in the kernel log, a
flapping RDMA port, a failing DCGM diagnostic, ACS on between a GPU and a NIC.

A container has no GPU, no RDMA NIC and the host's kernel log, so each fault plants the
real tool's evidence, in its real format, where ``check`` reads it on that node, and
names it a stand-in (:mod:`nodetune.lab.standin_paths`):

- ``xid``: appends a kmsg-format NVRM Xid 79 record (driver wording, timed now) to the
  file the lab inventory names as the kernel log (``nodetune_kernel_log``);
- ``rdma-flap``: an ACTIVE 400 Gb/s port ``mlx5_0/1`` under the lab's stand-in sysfs
  (``nodetune_rdma_sysfs``) whose ``link_downed``/``link_error_recovery`` counters are past
  ibcheckerrs' limit; each further ``rdma-flap`` adds one more flap;
- ``rdma-port``: an ACTIVE 400 Gb/s port ``mlx5_0/1`` (its counters clean) and a stand-in
  ``ib_write_bw`` (perftest's command line, TCP rendezvous and report) that reports the
  stand-in NIC's bandwidth, ``--rate`` (default 392gbit, an NDR port's usual result), for
  ``check --rdma-peer`` and ``validate --rdma-bw``;
- ``dcgm-fail``: a stand-in ``dcgmi`` whose ``diag -r N -j`` fails the PCIe test on GPU 1;
- ``pcie-acs``: a stand-in ``lspci`` listing a GPU and a NIC under a switch with ACS on.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from importlib import resources

from nodetune.lab.standin_paths import (
    DATA_DIR,
    DCGMI,
    IB_WRITE_BW,
    IB_WRITE_BW_GBPS,
    KMSG,
    LSPCI,
    RDMA_SYSFS,
)

FAULTS = {
    "xid": "an NVRM Xid 79 (GPU fallen off the bus) record in the node's stand-in kernel log",
    "rdma-flap": "a stand-in RDMA port, ACTIVE, whose link_downed counter climbs",
    "rdma-port": "a stand-in RDMA port, ACTIVE, and a stand-in ib_write_bw reporting --rate "
                 "(default 392gbit)",
    "dcgm-fail": "a stand-in dcgmi whose diagnostic fails the PCIe test on GPU 1",
    "pcie-acs": "a stand-in lspci showing ACS on between a GPU and a NIC",
}
PORT = f"{RDMA_SYSFS}/mlx5_0/ports/1"
FLAPPED = 11  # link_downed on a fresh stand-in port: past ibcheckerrs' limit of 10
PORT_GBPS = 392.0  # rdma-port's default: what ib_write_bw reports on a healthy NDR port
XID_TEXT = "NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."

Exec = Callable[..., str]


def _write(run: Exec, path: str, text: str, mode: str = "0644") -> None:
    run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1" && chmod "$3" "$1"',
         "sh", path, text, mode])


def _standin(name: str) -> str:
    return resources.files("nodetune.lab").joinpath("standins", name).read_text()


def _port(run: Exec, counters: int) -> None:
    """The stand-in port mlx5_0/1, ACTIVE at 400 Gb/s, if it is not there yet."""
    if run(["test", "-d", PORT], check=False, rc=True) == "0":
        return
    for key, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                       ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
        _write(run, f"{PORT}/{key}", value + "\n")
    for key in ("symbol_error", "port_rcv_errors", "local_link_integrity_errors",
                "excessive_buffer_overrun_errors"):
        _write(run, f"{PORT}/counters/{key}", "0\n")
    for key in ("link_downed", "link_error_recovery"):
        _write(run, f"{PORT}/counters/{key}", f"{counters}\n")


def apply(run: Exec, kind: str, *, gbps: float = PORT_GBPS) -> str:
    """Plant fault ``kind`` through ``run`` (podman exec on the node); say what was done."""
    if kind == "rdma-port":
        _port(run, 0)
        _write(run, IB_WRITE_BW_GBPS, f"{gbps:g}\n")
        _write(run, IB_WRITE_BW, _standin("ib_write_bw"), "0755")
        return (f"stand-in port mlx5_0/1 under {RDMA_SYSFS} (ACTIVE, 400 Gb/s) and "
                f"{IB_WRITE_BW} reporting {gbps:g} Gb/s")
    if kind == "xid":
        uptime = float(run(["cat", "/proc/uptime"]).split()[0])
        record = f"4,{int(uptime)},{int(uptime * 1e6)},-;{XID_TEXT}\n"
        run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" >> "$1"', "sh", KMSG,
             record])
        return f"Xid 79 on 0000:19:00 written to the stand-in kernel log {KMSG}"
    if kind == "rdma-flap":
        _port(run, FLAPPED - 1)
        for key in ("link_downed", "link_error_recovery"):
            path = f"{PORT}/counters/{key}"
            _write(run, path, f"{int(run(['cat', path]).strip()) + 1}\n")
        downed = run(["cat", f"{PORT}/counters/link_downed"]).strip()
        return f"stand-in port mlx5_0/1 under {RDMA_SYSFS}: ACTIVE, link_downed {downed}"
    if kind == "dcgm-fail":
        _write(run, f"{DATA_DIR}/dcgmi-diag-fail.json", _standin("dcgmi-diag-fail.json"))
        _write(run, DCGMI, _standin("dcgmi"), "0755")
        return f"stand-in {DCGMI}: dcgmi diag fails the PCIe test on GPU 1"
    _write(run, f"{DATA_DIR}/lspci-acs-on.txt", _standin("lspci-acs-on.txt"))
    _write(run, LSPCI, _standin("lspci"), "0755")
    return f"stand-in {LSPCI}: ACS source validation on at bridges 0000:17:00.0, 0000:17:01.0"


# rdma-flap: the port itself (pcie-aer plants an RDMA device without ports)
PLANTED = {"xid": KMSG, "rdma-flap": PORT, "rdma-port": IB_WRITE_BW, "dcgm-fail": DCGMI,
           "pcie-acs": LSPCI}


def active(run: Exec) -> list[str]:
    """The run-time faults in place on the node."""
    return [k for k, path in PLANTED.items() if run(["test", "-e", path], check=False,
                                                    rc=True) == "0"]


def clear(run: Exec) -> list[str]:
    """Remove every stand-in; say what was removed."""
    found = active(run)
    if found:
        run(["rm", "-rf", KMSG, RDMA_SYSFS, IB_WRITE_BW, DCGMI, LSPCI, DATA_DIR])
    return [f"{k} stand-in removed ({shlex.quote(PLANTED[k])})" for k in found]

