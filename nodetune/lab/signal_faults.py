"""Run-time faults for the node-local signals `nodetune check` reads beside the GPUs: a
PCIe link trained down with AER errors, a clock off NTP time, a host-wide NCCL variable
against provisioning, a hung nvidia-smi, and another OFED version than the fleet's.

As in :mod:`nodetune.lab.health_faults`, each plants the real tool's evidence, in its real
format, where ``check`` reads it on the node, named a stand-in
(:mod:`nodetune.lab.standin_paths`):

- ``pcie-aer``: a stand-in PCI device tree (``nodetune_pci_sysfs``, links into it as
  /sys/bus/pci/devices links into /sys/devices): a ConnectX-7 (``mlx5_0``, linked from the
  stand-in RDMA class directory) whose link trained at x8 of its x16, and an H100, each
  under its own switch port; the HCA's ``aer_dev_correctable``/``aer_dev_nonfatal``/
  ``aer_dev_fatal`` in the kernel's format (drivers/pci/pcie/aer.c ``aer_stats_dev_attr``:
  one ``NAME COUNT`` line per named error bit, then ``TOTAL_ERR_*``;
  Documentation/ABI/testing/sysfs-bus-pci-devices-aer, read 2026-11-30). Each further
  ``pcie-aer`` is one more round of errors on that link: RxErr +2, BadDLLP +1 and one
  non-fatal completion timeout (CmpltTO), as between two checks;
- ``clock-skew``: a stand-in ``chronyc`` whose ``tracking`` reports the clock 250 ms slow
  of NTP time (chrony's text and ``-c`` CSV forms, standins/chronyc);
- ``global-env``: ``NCCL_SOCKET_IFNAME=eth0`` (the management interface) added to the
  node's real /etc/environment, against the lab's ``nccl_config_socket_ifname: =eth1``;
  the file as it was is kept and put back by ``clear``;
- ``smi-hang``: a stand-in ``nvidia-smi`` that never answers (standins/nvidia-smi);
- ``ofed-version``: a stand-in ``ofed_info`` whose ``-s`` prints ``--ofed-version``
  (default DOCA-Host 3.2.1's), so ``fleet.versions`` compares OFED across nodes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from importlib import resources

from nodetune.lab.standin_paths import (
    CHRONYC,
    DATA_DIR,
    ENV_SAVED,
    ENVIRONMENT,
    NVIDIA_SMI,
    OFED_INFO,
    OFED_VERSION_FILE,
    PCI_SYSFS,
    PCI_TREE,
    RDMA_SYSFS,
    STANDIN_DIR,
)

FAULTS = {
    "pcie-aer": "a stand-in PCI tree: HCA mlx5_0's link at x8 of x16, AER errors that rise "
                "with each pcie-aer",
    "clock-skew": "a stand-in chronyc: the clock 250 ms slow of NTP time",
    "global-env": "NCCL_SOCKET_IFNAME=eth0 in /etc/environment, against nccl_config's =eth1",
    "smi-hang": "a stand-in nvidia-smi that never answers",
    "ofed-version": "a stand-in ofed_info -s printing --ofed-version (default "
                    "OFED-internal-25.10-1.7.1)",
}
OFED_DEFAULT = "OFED-internal-25.10-1.7.1"  # DOCA-Host 3.2.1 (roles/ofed/README.md)
_OFED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}$")
ENV_LINE = "NCCL_SOCKET_IFNAME=eth0"
ENV_TEXT = ("# planted by `nodetune lab fault NODE global-env`; `nodetune lab fault NODE clear` "
            f"puts the file back\n{ENV_LINE}\n")

# The PCI topology of the lab's stand-in lspci (standins/lspci-acs-on.txt): a root port,
# a PCIe switch, the HCA and the GPU each under a port of their own.
HCA, GPU = "0000:18:00.0", "0000:19:00.0"
_PATHS = {"0000:15:01.0": "pci0000:15/0000:15:01.0",
          "0000:16:00.0": "pci0000:15/0000:15:01.0/0000:16:00.0",
          "0000:17:00.0": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0",
          "0000:17:01.0": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0",
          HCA: "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0",
          GPU: "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"}
# vendor, device, class; PCI IDs as the PCI ID repository names them (pci-ids.ucw.cz):
# Mellanox MT2910 [ConnectX-7], NVIDIA GH100 [H100 SXM5 80GB], Broadcom PEX890xx ports.
_IDS = {"0000:17:00.0": ("0x1000", "0xc030", "0x060400"),
        "0000:17:01.0": ("0x1000", "0xc030", "0x060400"),
        HCA: ("0x15b3", "0x1021", "0x020700"), GPU: ("0x10de", "0x2330", "0x030200")}
# Error bits with names, in bit order (aer_correctable_error_string /
# aer_uncorrectable_error_string of drivers/pci/pcie/aer.c): what aer_dev_* list.
COR_NAMES = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr",
             "HeaderOF")
UNCOR_NAMES = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt",
               "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
               "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked")

Exec = Callable[..., str]


def ofed_version(value: str | None) -> str:
    """``--ofed-version`` checked: a plain version (it is written to a file on the node).

    Raises:
        ValueError: not a plain version.
    """
    version = OFED_DEFAULT if value is None else value
    if not _OFED.match(version):
        raise ValueError(f"--ofed-version {version!r}: expected a version like "
                         f"{OFED_DEFAULT} (letters, digits, . _ + ~ -)")
    return version


def aer_text(names: tuple[str, ...], counts: dict[str, int], total: str) -> str:
    """One aer_dev_* file as the kernel prints it: every named bit, then the total."""
    return ("".join(f"{n} {counts.get(n, 0)}\n" for n in names)
            + f"TOTAL_{total} {sum(counts.values())}\n")


def hca_aer(rounds: int, *, clean: bool = False) -> dict[str, str]:
    """The HCA's three AER files after ``rounds`` rounds of errors since the first plant
    (``clean``: a function without errors, every count 0)."""
    cor = {} if clean else {"RxErr": 3 + 2 * rounds, "BadDLLP": 1 + rounds}
    nonfatal = {} if clean else {"CmpltTO": rounds}
    return {"correctable": aer_text(COR_NAMES, cor, "ERR_COR"),
            "nonfatal": aer_text(UNCOR_NAMES, nonfatal, "ERR_NONFATAL"),
            "fatal": aer_text(UNCOR_NAMES, {}, "ERR_FATAL")}


def _write(run: Exec, path: str, text: str, mode: str = "0644") -> None:
    run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1" && chmod "$3" "$1"',
         "sh", path, text, mode])


def _link(run: Exec, target: str, link: str) -> None:
    run(["sh", "-c", 'mkdir -p "$(dirname "$2")" && ln -sfn "$1" "$2"', "sh", target, link])


def _standin(name: str) -> str:
    return resources.files("nodetune.lab").joinpath("standins", name).read_text()


def _function(run: Exec, addr: str) -> None:
    """A PCI function's directory with its IDs, link and (zero) AER counters."""
    where = f"{PCI_TREE}/{_PATHS[addr]}"
    vendor, device, cls = _IDS[addr]
    width = "8" if addr == HCA else "16"
    files = {"vendor": vendor, "device": device, "class": cls,
             "current_link_speed": "32.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe",
             "current_link_width": width, "max_link_width": "16"}
    if addr != HCA:  # the HCA's counters are the fault's (_pcie_aer)
        files |= {f"aer_dev_{k}": v for k, v in hca_aer(0, clean=True).items()}
    for name, text in files.items():
        _write(run, f"{where}/{name}", text if text.endswith("\n") else text + "\n")


def _pcie_aer(run: Exec) -> str:
    hca = f"{PCI_TREE}/{_PATHS[HCA]}"
    nonfatal = run(["cat", f"{hca}/aer_dev_nonfatal"], check=False)
    m = re.search(r"^CmpltTO ([0-9]+)$", nonfatal, re.M)
    rounds = int(m[1]) + 1 if m else 0
    if m is None:  # the first plant: the tree, the links, the RDMA device's function
        for addr, path in _PATHS.items():
            run(["mkdir", "-p", f"{PCI_TREE}/{path}"])
            if addr in _IDS:
                _function(run, addr)
            _link(run, f"{PCI_TREE}/{path}", f"{PCI_SYSFS}/{addr}")
        _link(run, hca, f"{RDMA_SYSFS}/mlx5_0/device")
    for kind, text in hca_aer(rounds).items():
        _write(run, f"{hca}/aer_dev_{kind}", text)
    return (f"stand-in PCI tree {PCI_TREE}: HCA mlx5_0 ({HCA}) at x8 of x16, AER RxErr "
            f"{3 + 2 * rounds}, BadDLLP {1 + rounds}, CmpltTO (non-fatal) {rounds}")


def apply(run: Exec, kind: str, *, ofed: str = OFED_DEFAULT) -> str:
    """Plant fault ``kind`` through ``run`` (podman exec on the node); say what was done."""
    if kind == "pcie-aer":
        return _pcie_aer(run)
    if kind == "clock-skew":
        _write(run, CHRONYC, _standin("chronyc"), "0755")
        return f"stand-in {CHRONYC}: tracking reports the clock 250 ms slow of NTP time"
    if kind == "global-env":
        # the file as it was is kept once (a second global-env plants from the same copy)
        run(["sh", "-c", 'set -e; mkdir -p "$(dirname "$1")"\n'
             'if [ ! -e "$1" ] && [ ! -e "$1.absent" ]; then\n'
             '  if [ -e "$2" ]; then cp -p "$2" "$1"; else : > "$1.absent"; fi\nfi\n'
             'if [ -e "$1" ]; then cp -p "$1" "$2"\n'
             '  if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then echo >> "$2"; fi\n'
             'else : > "$2"; fi\nprintf %s "$3" >> "$2"', "sh", ENV_SAVED, ENVIRONMENT,
             ENV_TEXT])
        return f"{ENV_LINE} added to {ENVIRONMENT} (the file as it was kept in {ENV_SAVED})"
    if kind == "smi-hang":
        _write(run, NVIDIA_SMI, _standin("nvidia-smi"), "0755")
        return f"stand-in {NVIDIA_SMI}: never answers"
    _write(run, OFED_VERSION_FILE, ofed + "\n")
    _write(run, OFED_INFO, _standin("ofed_info"), "0755")
    return f"stand-in {OFED_INFO}: ofed_info -s prints {ofed}:"


def planted() -> dict[str, tuple[str, ...]]:
    """Each fault's stand-ins: it is in place while one of them exists."""
    return {"pcie-aer": (PCI_TREE,), "clock-skew": (CHRONYC,),
            "global-env": (ENV_SAVED, ENV_SAVED + ".absent"), "smi-hang": (NVIDIA_SMI,),
            "ofed-version": (OFED_INFO,)}


def active(run: Exec) -> list[str]:
    """The faults of this module in place on the node."""
    return [k for k, paths in planted().items()
            if any(run(["test", "-e", p], check=False, rc=True) == "0" for p in paths)]


def clear(run: Exec) -> list[str]:
    """Remove every stand-in of this module and put /etc/environment back; say what was
    done. Runs after :func:`nodetune.lab.health_faults.clear`, and removes the stand-in
    directories left empty."""
    found = active(run)
    if "global-env" in found:
        run(["sh", "-c", 'set -e\nif [ -e "$1" ]; then cp -p "$1" "$2" && rm -f "$1"\n'
             'elif [ -e "$1.absent" ]; then rm -f "$2" "$1.absent"; fi', "sh", ENV_SAVED,
             ENVIRONMENT])
    if found:
        run(["rm", "-rf", PCI_TREE, PCI_SYSFS, f"{RDMA_SYSFS}/mlx5_0/device", CHRONYC,
             NVIDIA_SMI, OFED_INFO, OFED_VERSION_FILE])
    # the directories the stand-ins made (any fault's), where nothing is left in them
    run(["sh", "-c", 'for d in "$@"; do [ -d "$d" ] && rmdir --ignore-fail-on-non-empty '
         '"$d"; done; true', "sh", f"{RDMA_SYSFS}/mlx5_0", RDMA_SYSFS, DATA_DIR,
         STANDIN_DIR])
    return [f"{k} stand-in removed ({shlex.quote(planted()[k][0])})"
            if k != "global-env" else f"{ENVIRONMENT} put back as it was" for k in found]
