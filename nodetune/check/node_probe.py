"""What `nodetune check` reads on a node, in one round trip: stdlib only, Python >= 3.8.

The controller runs this file's source as ``PYTHON -c SOURCE REQUEST_JSON``
(nothing is written to the node) and parses the one JSON document it prints.
It only reads: sysfs, /proc/sys, /dev/shm, each GPU's state through NVML
(:mod:`nodetune.check.node_nvml`, in a process of its own; ``nvidia-smi -q -x`` where NVML
cannot be loaded or fails), ``nvidia-smi nvlink -s -e`` (link state and error counters in
one run), ``mlnx_qos -i IF`` (read-only without set options),
each RoCE port's PPCC register (``mlxreg --get``) only when asked (``check --read-ppcc``),
the clock's sync state and host-wide NCCL_/CUDA_ variables (:mod:`nodetune.check.node_host`),
and, when asked, torch's versions through the node's ``nodetune_python``.

Names read from the node (interfaces, RDMA devices) are checked against
plain-name patterns before they become a path or an argument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
SYSCTL = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$")
# Tests point this at a fake tree of sys/, proc/ and dev/shm ("" on a node).
ROOT = ""
# node_facts' fact script (roles/node_facts/files/nodetune.fact), which reads the
# PCI bus, the RDMA ports and the interfaces for the roles: probe.source() puts its
# text here, and fact() runs it as a namespace (node_run.fact_loader, below) the first
# time it is asked, which main() does first, pointing it at the tree under ROOT.
FACT_SOURCE = ""
# node_host.py (time sync, host-wide environment): probe.source() puts its text here.
HOST_SOURCE = ""
HOST: dict[str, Any] = {}
# node_nvml.py (each GPU's state through NVML): probe.source() puts its text here; imported
# as part of the package, the probe reads the module's file.
NVML_SOURCE = ""
# When every tool must have answered (time.monotonic(); 0: no limit), so that tools that
# hang one after the other cannot together outlast the controller's wait for the probe:
# a tool started later gets what is left, and none once it is spent (request "budget").
DEADLINE = 0.0
# node_run.py (the tool runner, the file reader, the PCI walk), imported as part of the
# package; on a node its text stands in this import's place (node_program.embed).
from nodetune.check import node_run  # noqa: E402 - node_program.embed

read = node_run.read
kill_group = node_run.kill_group
PCI_ADDR = node_run.PCI_ADDR
fact = node_run.fact_loader(FACT_SOURCE)  # its functions

TORCH_SNIPPET = r"""
import json
out = {}
try:
    import torch
    import torch.distributed as dist
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["nccl_available"] = bool(dist.is_available() and dist.is_nccl_available())
    try:
        out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception as exc:
        out["nccl"] = None
        out["nccl_error"] = str(exc)[:200]
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)[:300]
print(json.dumps(out))
"""


def run(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run a tool with node_run's runner (its group killed on timeout, ``unknown`` where
    it gives no answer) within what is left of the probe's time (:data:`DEADLINE`)."""
    got: dict[str, Any] = node_run.run(argv, timeout, DEADLINE)
    return got


def nvml(timeout: float) -> dict[str, Any]:
    """node_nvml.py's run (``rc`` 0: its JSON document on stdout), in a process of its own."""
    source = NVML_SOURCE
    if not source:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_nvml.py"),
                  encoding="utf-8") as fh:
            source = fh.read()
    got = run([sys.executable, "-S", "-c", source], timeout)
    why = got.get("unknown")
    if why:  # the runner names the interpreter; the read is what did not answer
        name = os.path.basename(sys.executable)
        got["unknown"] = "the NVML read" + (why[len(name):] if why.startswith(name) else
                                            f": {why}")
    return got


def nvidia(timeout: float) -> dict[str, Any]:
    # NVIDIA (vendor 0x10de) display/3D controllers (PCI class 0x03xxxx) on the bus,
    # so a GPU the driver does not see still counts.
    facts = fact()
    pci = len(facts["nvidia_gpus"](facts["pci_devices"]()))
    tool = shutil.which("nvidia-smi")
    # The loaded module's first line names its flavour ("Open Kernel Module").
    module = read(ROOT + "/proc/driver/nvidia/version")
    out: dict[str, Any] = {"pci_gpus": pci, "tool": tool,
                           "module": module.splitlines()[0] if module else None}
    # NVML first: 0.5-0.75x nvidia-smi -q -x's CPU, 0.4-0.5x its wall (docs/benchmarks.md).
    # Where it hung nvidia-smi would hang too, so nothing else is asked; where the library
    # is missing, failed or crashed, nvidia-smi -q -x reads the same, or says why it cannot.
    out["nvml"] = nvml(timeout)
    if out["nvml"].get("unknown") and out["nvml"]["rc"] is None:  # hung, or no time left
        return out
    try:
        doc = json.loads(out["nvml"]["stdout"]) if out["nvml"]["rc"] == 0 else None
    except ValueError:
        doc = None
    # An NVML read that found no GPU asks nvidia-smi too: its own words say why ("No
    # devices were found"), as before NVML was read.
    answered = isinstance(doc, dict) and bool(doc.get("gpus"))
    if tool and not answered:
        out["query"] = run([tool, "-q", "-x"], timeout)
        answered = out["query"]["rc"] == 0 and "<gpu " in out["query"]["stdout"]
    if tool and answered:
        # Link state and error counters in one run: 0.08 CPU-s on 2x H200 against
        # 0.10 as two (docs/benchmarks.md); nvidia_smi.parse_nvlink and
        # nvlink_errors.parse each read their own lines of it.
        out["nvlink"] = out["nvlink_errors"] = run([tool, "nvlink", "-s", "-e"], timeout)
    return out


def ofed(timeout: float) -> tuple[str | None, str | None]:
    """The MLNX_OFED / DOCA-OFED version ``ofed_info -s`` prints (DOCA 3.2.1:
    ``OFED-internal-25.10-1.7.1:``, as roles/ofed/README.md records it), without its
    colon, and why it could not be read where the tool hung or crashed; (None, None)
    where the tool is not installed (the inbox rdma-core stack)."""
    tool = shutil.which("ofed_info")
    if not tool:
        return None, None
    got = run([tool, "-s"], timeout)
    if got.get("unknown"):
        return None, str(got["unknown"])[:200]
    first = (got["stdout"].strip().splitlines() or [""])[0].strip().rstrip(":")
    return (first[:120] if got["rc"] == 0 and first else None), None


def rdma(devices: list[dict[str, Any]]) -> list[dict[str, str | None]]:
    """node_facts' RDMA devices as one entry per port."""
    ports: list[dict[str, str | None]] = []
    for dev in devices:
        if not NAME.match(dev["name"]):
            continue
        for port in dev["ports"]:
            entry: dict[str, str | None] = {"device": dev["name"], "port": str(port["port"])}
            for key in ("state", "phys_state", "rate", "link_layer", "netdev"):
                entry[key] = port[key]
            ports.append(entry)
    return ports


def ipv4(name: str) -> str | None:
    """The interface's IPv4 address (SIOCGIFADDR), without needing `ip`."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interfaces(devices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """node_facts' interfaces (the loopback too) by name, with each one's IPv4 address."""
    out: dict[str, dict[str, Any]] = {}
    for link in fact()["interfaces"](devices):
        name = link["name"]
        if NAME.match(name):
            out[name] = {"mtu": link["mtu"], "type": link["type"],
                         "operstate": link["operstate"], "ipv4": ipv4(name),
                         "rdma": link["rdma"]}
    return out


def sysctls(keys: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        if SYSCTL.match(key):
            path = ROOT + "/proc/sys/" + key.replace(".", "/")
            out[key] = {"value": read(path), "writable": os.access(path, os.W_OK)}
    return out


def shm() -> dict[str, Any]:
    """Size and free space of /dev/shm (free as an unprivileged rank sees it: f_bavail)."""
    try:
        st = os.statvfs(ROOT + "/dev/shm")  # noqa: S108 - its space is what is checked
    except OSError as exc:
        return {"error": str(exc)}
    return {"bytes": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def ppcc_argv(tool: str, pci: str, port: str) -> list[str]:
    """mlxreg's read of the port's PPCC register, algo_slot 0's status: a GET access with the
    command type among mlxreg's ``--op`` fields (nodetune.check.roce_cc says why not SET)."""
    return [tool, "-d", pci, "--reg_name", "PPCC", "--get", "--op", "cmd_type=0x3",
            "--indexes", f"local_port={port},pnat=0,lp_msb=0,algo_slot=0,algo_param_index=0"]


def roce(ports: list[dict[str, str | None]], timeout: float, *,
         ppcc: bool = False) -> dict[str, Any]:
    """mlnx_qos -i, the ECN enables and RDMA-CM's ToS of each RoCE port; with ``ppcc`` (asked
    by name: check --read-ppcc), each port's PPCC register through mlxreg too."""
    tool = shutil.which("mlnx_qos")
    mlxreg = shutil.which("mlxreg") if ppcc else None
    netdevs: dict[str, Any] = {}
    for port in ports:
        netdev = port.get("netdev") or ""
        if port.get("link_layer") != "Ethernet" or not NAME.match(netdev):
            continue
        ecn: dict[str, str] = {}
        entry: dict[str, Any] = {"device": port["device"], "port": port["port"], "ecn": ecn}
        if tool:
            entry["mlnx_qos"] = run([tool, "-i", netdev], timeout)
        for point in ("roce_np", "roce_rp"):
            for prio in range(8):
                value = read(f"{ROOT}/sys/class/net/{netdev}/ecn/{point}/enable/{prio}")
                if value is not None:
                    ecn[f"{point}/{prio}"] = value
        entry["rdma_cm_tos"] = read(f"{ROOT}/sys/kernel/config/rdma_cm/{port['device']}/ports/"
                                    f"{port['port']}/default_roce_tos")
        pci = os.path.basename(os.path.realpath(
            f"{ROOT}/sys/class/infiniband/{port['device']}/device"))
        if mlxreg and PCI_ADDR.match(pci) and str(port["port"]).isdigit():
            entry["ppcc"] = {"pci": pci, **run(ppcc_argv(mlxreg, pci, str(port["port"])),
                                               timeout)}
        netdevs[netdev] = entry
    return {"tool": tool, "netdevs": netdevs, "ppcc_asked": ppcc, "mlxreg": mlxreg}


def nccl_conf(path: str) -> dict[str, Any] | None:
    """The NCCL config file NCCL reads on this node (its first 64 KiB), or None."""
    if not path.startswith("/"):
        return None
    text = read(ROOT + path, limit=65536)
    return None if text is None else {"path": path, "content": text}


def torch_start(python: str | None, env: dict[str, str]
                ) -> subprocess.Popen[bytes] | dict[str, Any] | None:
    """Start importing torch (the probe's slowest read) so the other reads run beside it,
    in the environment validate's workers get (``nodetune_env``)."""
    if not python:
        return None
    try:
        return subprocess.Popen([python, "-c", TORCH_SNIPPET], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, **env},
                                start_new_session=True)
    except OSError as exc:
        return {"error": f"exit None: {str(exc)[:300]}"}


def torch_info(started: subprocess.Popen[bytes] | dict[str, Any] | None,
               timeout: float) -> dict[str, Any] | None:
    """What :func:`torch_start`'s import printed, or why it printed nothing."""
    if started is None or isinstance(started, dict):
        return started
    if DEADLINE:
        timeout = max(1.0, min(timeout, DEADLINE - time.monotonic()))
    try:
        out, err = started.communicate(timeout=timeout)
        rc: int | None = started.returncode
        stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        kill_group(started)
        started.communicate()
        rc, stdout, stderr = None, "", f"no answer within {timeout:g} s"
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if rc == 0 and lines:
        try:
            doc: dict[str, Any] = json.loads(lines[-1])
            return doc
        except ValueError:
            pass
    detail = (stderr[-2000:] or stdout).strip()[-300:]
    return {"error": f"exit {rc}: {detail}"}


def main() -> None:
    global ROOT, DEADLINE  # noqa: PLW0603 - one setting for the whole run
    request = json.loads(sys.argv[1])
    budget = float(request.get("budget") or 0)
    DEADLINE = time.monotonic() + budget if budget > 0 else 0.0
    ROOT = str(request.get("root", ""))
    fact().update(SYS=ROOT + "/sys", PROC=ROOT + "/proc")
    exec(compile(HOST_SOURCE, "node_host.py", "exec"), HOST)  # noqa: S102 - node_host.py
    timeout = float(request.get("timeout", 60))
    # torch's import takes about 3 s: the reads below run beside it
    torch = torch_start(request.get("torch_python"),
                        {str(k): str(v) for k, v in (request.get("torch_env") or {}).items()})
    devices = fact()["rdma_devices"]()
    ports = rdma(devices)
    doc = {
        "probe": 1,
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        # The address the SSH client reached (sshd sets it): net_mtu leaves that NIC alone.
        "connection_address": (os.environ.get("SSH_CONNECTION") or "").split()[2:3],
        "nvidia": nvidia(timeout),
        "rdma": ports,
        "interfaces": interfaces(devices),
        "sysctl": sysctls(request.get("sysctls", [])),
        "shm": shm(),
        "roce": roce(ports, timeout, ppcc=bool(request.get("ppcc"))),
        "nccl_conf": nccl_conf(str(request.get("nccl_conf") or "")),
        "time_sync": HOST["time_sync"](run, timeout),
        "global_env": HOST["global_env"](ROOT, run, timeout),
        "torch": torch_info(torch, timeout),
        # What the fleet compares across its nodes (check/versions.py)
        "kernel": os.uname().release,
        "hca_firmware": {d["name"]: d["fw_ver"] for d in devices
                         if NAME.match(d["name"]) and d.get("fw_ver")},
    }
    doc["ofed"], doc["ofed_unknown"] = ofed(timeout)
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
