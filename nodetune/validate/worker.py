"""The program nodetune uploads to each node: probe, launch guard, and the measurement.

Self-contained on purpose (stdlib + torch, Python >= 3.8): it is copied to the
node as one file and run by the node's own Python. Every machine-readable line
it prints is a line of :mod:`nodetune.validate.protocol`, which is uploaded
beside it as ``nodetune_protocol.py``.

  serve   --master ADDR [--free-port]   import torch once, say what the node has (python,
                                        torch, GPUs, interface), then read the launch
                                        spec (one JSON line) on stdin and fork this
                                        node's ranks, each running ``measure``
  launch  [--remove-after S] -- CMD...  run CMD in its own session, stdin passed on; kill
                                        its process group when stdin closes or on
                                        SIGTERM/SIGINT/SIGHUP, then (after S seconds, in
                                        which the controller's own cleanup ends the
                                        guard) remove the run's temp dir, the worker's
                                        own, so that a node that froze and thawed after
                                        the controller gave up keeps nothing
  reap    TOKEN                         SIGKILL what carries NODETUNE_RUN_ID=TOKEN
  ras     [--addr H:P] [--timeout S]    ask NCCL's RAS on this node for its communicators'
                                        status (``nodetune_ras.py``, uploaded beside) and
                                        print it as one ``ras`` event; the controller runs
                                        it on rank 0's node when a timed NCCL phase stalls
  (serve first sweeps what earlier runs left on the node: the temp dirs and processes of
  runs whose launch guard is gone, found by the run id in each dir's ``run-id`` file)
  measure --sizes B,B,.. ...            one rank (RANK, WORLD_SIZE, MASTER_ADDR, ... set):
                                        a collective (--collective: all_reduce, all_gather,
                                        reduce_scatter or alltoall) timed like nccl-tests'
                                        <collective>_perf

One torch import per node: ``serve`` imports it and forks the ranks, which
inherit it, instead of a probe that imports torch and a torch.distributed.run
that imports it again. The parent never touches CUDA before the fork (GPUs are
counted through NVML), so the ranks can use it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import statistics
import struct
import subprocess
import sys
import threading
import time
from typing import Any

try:  # on a node: the protocol module uploaded beside this file
    import nodetune_protocol as protocol  # type: ignore[import-not-found]
except ImportError:  # imported or run from the package
    from nodetune.validate import protocol

RUN_VAR = protocol.RUN_VAR
# Timed rounds per size (each `iters` ops): as many as fit in ROUNDS_S seconds at the
# first round's pace, at most MAX_ROUNDS; the median is reported.
MAX_ROUNDS, ROUNDS_S = 9, 0.1
_SIOCGIFADDR = 0x8915


def emit(event: str, **fields: object) -> None:
    """Print one protocol line and flush it at once."""
    sys.stdout.write(protocol.encode(event, **fields))
    sys.stdout.flush()


# --- probe --------------------------------------------------------------------------


def _ipv4_addresses() -> dict[str, str]:
    """Each interface that holds an IPv4 address (and is up), in ifindex order."""
    import fcntl

    out: dict[str, str] = {}
    for _index, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
        try:
            with open(f"/sys/class/net/{name}/operstate") as fh:
                if fh.read().strip() == "down":
                    continue
        except OSError:
            pass
        out[name] = socket.inet_ntoa(packed[20:24])
    return out


def _route_dev(address: str) -> str | None:
    try:
        out = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True,
                             text=True, timeout=5, check=False).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[out.index("dev") + 1] if "dev" in out[:-1] else None


def interface_for(address: str) -> tuple[str | None, str | None]:
    """(interface, local address) this node would use to reach ``address``."""
    try:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            local = sock.getsockname()[0]
    except OSError:
        return None, None
    if family == socket.AF_INET:
        for name, held in _ipv4_addresses().items():
            if held == local:
                return name, local
    return _route_dev(address), local


def interfaces_info() -> dict[str, object]:
    """The interfaces a data path may take, the RDMA netdevs among them, and the one SSH
    came in on (SSH_CONNECTION's server address; none under a local connection)."""
    held = _ipv4_addresses()
    rdma = [n for n in held if os.path.isdir(f"/sys/class/net/{n}/device/infiniband")]
    server = (os.environ.get("SSH_CONNECTION") or "").split()[2:3]
    ssh = None
    if server:
        ssh = next((n for n, a in held.items() if a == server[0]), None) or (
            _route_dev(server[0]) if ":" in server[0] else None)
    return {"interfaces": list(held), "rdma_interfaces": rdma,
            "ssh_iface": ssh, "addresses": sorted(set(held.values()))}


def probe_info(args: argparse.Namespace) -> dict[str, object]:
    """What the node has, with torch imported once (None in ``torch_error`` when it can't be).

    CUDA is not initialised here: GPUs are counted through NVML
    (PYTORCH_NVML_BASED_CUDA_CHECK), so the ranks forked afterwards can use it.
    """
    info: dict[str, object] = {
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
    }
    if args.master:
        info["iface"], info["local_address"] = interface_for(args.master)
    info.update(interfaces_info())
    if args.free_port:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            info["free_port"] = sock.getsockname()[1]
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    t0 = time.perf_counter()
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # report any import failure, not only ImportError
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["import_s"] = round(time.perf_counter() - t0, 3)
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["gloo"] = bool(dist.is_gloo_available())
    info["nccl_available"] = bool(dist.is_nccl_available())
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info["cuda_devices"] = count
    try:
        by_nvml = int(torch.cuda._device_count_nvml())  # -1: NVML could not count
    except Exception:
        by_nvml = -1
    # Without NVML the count came from the CUDA runtime, which initialised CUDA in
    # this process: a forked rank could not use it then, so the ranks are started
    # as new processes instead (a second torch import, but a correct one).
    info["fork"] = count == 0 or by_nvml >= 0
    if count and dist.is_nccl_available():
        info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    return info


def serve(args: argparse.Namespace) -> int:
    """Sweep what earlier runs left, probe, then run this node's ranks as the launch spec
    on stdin says."""
    swept = sweep(os.getcwd())
    if swept["runs"]:
        emit("swept", **swept)
    info = probe_info(args)
    emit("probe", **info)
    if "torch_error" in info:
        return 0
    spec = _own_spec()
    if spec is None:  # the controller stopped before the launch
        return 0
    code = run_ranks(spec, fork=bool(info["fork"]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit without interpreter shutdown: unloading torch takes a second, and the
    # controller's cleanup waits for this process group to be gone.
    os._exit(code)


def _own_spec() -> dict[str, Any] | None:
    """This node's launch spec from stdin (None at EOF). Under a Slurm step, srun gives
    every task the same stdin: each spec names its node (``slurm_node``), and a task
    skips the specs of the step's other nodes."""
    me = os.environ.get("SLURMD_NODENAME")
    while True:
        line = sys.stdin.readline()
        if not line.strip():
            return None
        spec: dict[str, Any] = json.loads(line)
        if spec.get("slurm_node") in (None, me):
            return spec


def run_ranks(spec: dict[str, Any], *, fork: bool) -> int:
    """Start ``spec["nproc"]`` ranks of ``measure`` and wait for them, like
    torch.distributed.run with static rendezvous and no restarts: the first rank
    to fail stops the others, and its exit code is this process's."""
    nproc, node_rank, nnodes = int(spec["nproc"]), int(spec["node_rank"]), int(spec["nnodes"])
    for name, value in spec["env"].items():
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            os.environ[name] = str(value)
    os.environ.update({"MASTER_ADDR": str(spec["master_addr"]),
                       "MASTER_PORT": str(spec["port"]),
                       "WORLD_SIZE": str(nnodes * nproc), "LOCAL_WORLD_SIZE": str(nproc),
                       "GROUP_RANK": str(node_rank), "NODE_RANK": str(node_rank)})
    argv = [str(a) for a in spec["argv"]]
    sys.stdout.flush()  # nothing buffered may be written twice by the forks
    sys.stderr.flush()
    ranks: dict[int, int] = {}
    for local in range(nproc):
        rank_env = {"RANK": str(node_rank * nproc + local), "LOCAL_RANK": str(local)}
        if fork:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.environ.update(rank_env)
                    devnull = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(devnull, 0)
                    _name_process(f"nodetune-rank{local}")
                    code = main(argv)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
        else:
            pid = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *argv],
                env={**os.environ, **rank_env}, stdin=subprocess.DEVNULL).pid
        ranks[pid] = local
    code = 0
    while ranks:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid not in ranks:
            continue
        local = ranks.pop(pid)
        rc = _exitcode(status)
        if rc != 0 and code == 0:
            sys.stderr.write(rank_failed(local, pid, rc))
            sys.stderr.flush()
            code = rc if rc > 0 else 128 - rc
            _stop(ranks)
    return code


def rank_failed(local: int, pid: int, rc: int) -> str:
    """The line saying a rank failed, in the words torch.distributed.run uses
    (``exitcode : -9`` for SIGKILL), which the controller reads to tell a killed
    rank from its victims."""
    return f"nodetune worker: local rank {local} (pid {pid}) failed: exitcode : {rc}\n"


def _stop(ranks: dict[int, int]) -> None:
    """SIGTERM the ranks still running, SIGKILL them after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while ranks and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                ranks.pop(pid, None)
            else:
                time.sleep(0.05)


def _exitcode(status: int) -> int:
    """A wait status as an exit code, negative for a signal (os.waitstatus_to_exitcode, 3.9+)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _name_process(name: str) -> None:
    """Set the process name ``ps -o comm`` and ``pgrep`` show (Linux; best effort)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as fh:
        fh.write(name[:15])


# --- launch -------------------------------------------------------------------------


def reap(token: str, sig: int = signal.SIGKILL) -> int:
    """Signal every process whose environment carries ``NODETUNE_RUN_ID=token``.

    torch.distributed.run starts each rank in a session of its own, so a rank
    orphaned by a dead or killed torchrun is outside the launcher's process
    group; the inherited environment marks it wherever it went.
    """
    if not token:
        return 0
    needle = f"{RUN_VAR}={token}".encode()
    hits = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/comm", "rb") as fh:
                if fh.read().strip() == GUARD_WAIT_NAME.encode():
                    continue  # a guard that ended its run: it leaves once its dir is gone
            os.kill(int(entry), sig)
            hits += 1
        except OSError:
            continue
    return hits


# A run's temp dir (the controller's mktemp template) and the id it writes into it: a copy
# of nodetune.remote.session.RUN_ID, as this file runs without the package (a test holds
# the two alike).
TMP_NAME = re.compile(r"^nodetune-validate\.[A-Za-z0-9]{8}$")
RUN_ID = re.compile(r"^[0-9a-f]{32}\Z")  # \Z: no trailing newline, as $ would take
RUN_ID_FILE = "run-id"
# A dir this young may belong to a run still uploading its worker (no guard yet).
SWEEP_GRACE_S = 20.0
# How long a guard that ended its run waits before it removes the run's dir: the
# controller's own cleanup (one round trip after it closes the guard's stdin) removes the
# dir itself first where it still runs, so the two never race.
GUARD_REMOVE_AFTER_S = 15.0
# The name such a guard takes while it waits (reap passes it over: it has ended its run's
# processes already, and leaves as soon as the controller has removed the dir).
GUARD_WAIT_NAME = "nodetune-rmwait"


def _marks() -> tuple[set[str], set[str]]:
    """Run ids carried by processes here, and those whose launch guard is still alive."""
    seen: set[str] = set()
    guarded: set[str] = set()
    prefix = f"{RUN_VAR}=".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                marks = [v[len(prefix):].decode() for v in fh.read().split(b"\0")
                         if v.startswith(prefix)]
            if not marks:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except (OSError, UnicodeDecodeError):
            continue
        seen.update(marks)
        # The guard: `python <worker> launch -- ...`; it ends its run's processes itself.
        if len(argv) > 2 and argv[1].endswith(b".py") and argv[2] == b"launch":
            guarded.update(marks)
    return seen, guarded


def sweep(keep: str) -> dict[str, Any]:
    """Remove what earlier runs left on this node: processes and temp dirs of runs whose
    launch guard is gone (the controller vanished, or the node froze past its cleanup).

    Only dirs beside ``keep`` (this run's), owned by this user, named like a run's temp
    dir and holding a run id are touched; the current run, runs whose guard still runs
    and dirs younger than SWEEP_GRACE_S are left alone.
    """
    own = os.environ.get(RUN_VAR, "")
    seen, guarded = _marks()
    live = guarded | {own}
    runs: list[str] = []
    dirs: list[str] = []
    killed = 0
    root = os.path.dirname(os.path.abspath(keep))
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(root, name)
        if not TMP_NAME.match(name) or path == os.path.abspath(keep):
            continue
        try:
            st = os.lstat(path)
            with open(os.path.join(path, RUN_ID_FILE), encoding="ascii") as fh:
                token = fh.read().strip()
        except (OSError, ValueError):
            continue
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or not RUN_ID.match(token)
                or token in live or time.time() - st.st_mtime < SWEEP_GRACE_S):
            continue
        killed += reap(token)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            dirs.append(path)
            runs.append(token)
    for token in sorted(seen - live - set(runs)):
        if RUN_ID.match(token):  # processes of a dead run whose dir is gone already
            hits = reap(token)
            if hits:
                killed += hits
                runs.append(token)
    return {"runs": runs, "dirs": dirs, "killed": killed}


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs.

    A process that has ended but whose parent has not collected it yet (a zombie, with
    no thread left) holds no memory, GPU or file, and does not count: ``kill -0`` would
    count it, and where PID 1 is slow to collect orphans (a container's init) that kept
    a finished run waiting a second or two.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                # After "pid (comm)": state, ppid, pgrp, ... num_threads is the 18th.
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            if fields[0] in (b"Z", b"X") and int(fields[17]) <= 1:
                continue
        except (OSError, IndexError, ValueError):
            continue
        return True
    return False


def stop_group(pgid: int, grace: float = 3.0) -> bool:
    """SIGTERM process group ``pgid``, SIGKILL what still runs after ``grace``; polled
    here on the node, so the controller pays one round trip. True when it is gone."""
    if pgid <= 1 or pgid == os.getpgrp():
        return False
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return not group_alive(pgid)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return True
            time.sleep(0.05)
    return not group_alive(pgid)


def remove_run_dir(path: str, token: str) -> bool:
    """Remove ``path`` if it is this run's temp dir (named by the controller's template,
    holding this run's id); True when it is gone."""
    path = os.path.abspath(path)
    try:
        with open(os.path.join(path, RUN_ID_FILE), encoding="ascii") as fh:
            owner = fh.read().strip()
    except (OSError, ValueError):
        return not os.path.lexists(path)
    if not TMP_NAME.match(os.path.basename(path)) or owner != token or os.path.islink(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def runs_root() -> str:
    """Where runs' temp dirs are made: the controller's mktemp root, ``${TMPDIR:-/tmp}``
    without its trailing slash (:data:`nodetune.validate.answers.MKTEMP`)."""
    return os.path.normpath(os.environ.get("TMPDIR") or "/tmp")  # noqa: S108 - a root only


def remove_own_run_dir(path: str, token: str, *, root: str | None = None) -> bool:
    """Remove ``path``, the launch guard's run dir, only if it is exactly run ``token``'s:
    a run id, a directory (not a link) of this user right under the runs' root (``root``,
    else :func:`runs_root`), named by the controller's template and holding that id
    (:func:`remove_run_dir`). True when it was removed."""
    path = os.path.abspath(path)
    root = os.path.normpath(root if root is not None else runs_root())
    if (not RUN_ID.match(token) or root == "/" or os.path.dirname(path) != root
            or not TMP_NAME.match(os.path.basename(path))):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    return remove_run_dir(path, token)


def reap_cmd(args: argparse.Namespace) -> int:
    """End what run ``token`` started here: its launch group (``--group``), any process
    carrying its id, then its temp dir (``--remove``), and say what was done."""
    result: dict[str, Any] = {}
    if args.group is not None:
        result["group_alive"] = not stop_group(args.group)
    result["count"] = reap(args.token)
    if args.remove:
        result["removed"] = remove_run_dir(args.remove, args.token)
    emit("reaped", **result)
    return 0



def launch(args: argparse.Namespace) -> int:  # noqa: PLR0915
    """Run the command as the leader of a new session and clean its group up on any exit."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    ready_r, ready_w = os.pipe()
    feed_r, feed_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: own session and process group, stdin from the guard
        os.setsid()
        os.write(ready_w, b"1")  # the group exists now: the parent may report it
        os.close(ready_w)
        os.close(feed_w)
        os.dup2(feed_r, 0)
        os.close(feed_r)
        try:
            os.execvp(cmd[0], cmd)  # noqa: S606 - argv from the controller, no shell
        finally:
            os._exit(127)
    os.close(ready_w)
    os.close(feed_r)
    os.read(ready_r, 1)
    os.close(ready_r)
    # This run's temp dir is where the controller put this file (the worker runs from it).
    own_dir = os.path.dirname(os.path.abspath(__file__))
    emit("launched", pgid=pid, hostname=socket.gethostname())
    stop = threading.Event()

    token = os.environ.get(RUN_VAR, "")

    def kill_group(reason: str) -> None:
        if stop.is_set():
            return
        stop.set()
        sys.stderr.write(f"nodetune launch: {reason}; stopping process group {pid}\n")
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        reap(token)

    def on_signal(signum: int, _frame: object) -> None:
        threading.Thread(target=kill_group, args=(f"signal {signum}",), daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    def watch_stdin() -> None:
        # The controller holds our stdin open and writes the launch spec on it,
        # which is passed on; EOF means it went away (SSH dropped, controller
        # killed, or done): take everything we started down with it.
        feeding = True
        try:
            while data := os.read(0, 65536):
                if feeding:
                    try:
                        os.write(feed_w, data)
                    except OSError:  # the command stopped reading: keep watching
                        feeding = False
        except (OSError, ValueError):
            pass
        kill_group("controller closed the connection")

    threading.Thread(target=watch_stdin, daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    # The launcher's child is gone; ranks it orphaned must not outlive it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    reap(token)
    if stop.is_set():
        # The guard ended the run (the controller's connection is gone, or a signal): its
        # temp dir goes too, unless the controller's cleanup removes it first (then the
        # guard just leaves). Otherwise a node that froze past that cleanup kept it.
        _name_process(GUARD_WAIT_NAME)
        deadline = time.monotonic() + getattr(args, "remove_after", GUARD_REMOVE_AFTER_S)
        while time.monotonic() < deadline and os.path.lexists(own_dir):
            time.sleep(0.2)
        if remove_own_run_dir(own_dir, token):
            sys.stderr.write(f"nodetune launch: removed {own_dir}\n")
    code = _exitcode(status)
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit without interpreter shutdown: the stdin watcher may still be blocked in read.
    os._exit(code if code >= 0 else 128 - code)


def ras_cmd(args: argparse.Namespace) -> int:
    """Ask NCCL's RAS on this node and print what it said as one ``ras`` event (imported
    here: the other verbs never need it)."""
    try:  # on a node: the RAS client uploaded beside this file
        import nodetune_ras as ras  # type: ignore[import-not-found]
    except ImportError:  # imported or run from the package
        from nodetune.validate import ras
    emit("ras", **ras.query(args.addr, args.timeout))
    return 0


# --- measure ------------------------------------------------------------------------


CONF_MAX = 65536  # bytes of one NCCL config file reported


def nccl_inputs() -> dict[str, object]:
    """What NCCL will read, before it starts: this process's NCCL_* environment and its
    config files in NCCL's order (NCCL_CONF_FILE, or else ~/.nccl.conf; then
    /etc/nccl.conf: NVIDIA/nccl src/misc/param.cc initEnvFunc). Read now because NCCL
    copies the files into the environment when it starts."""
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    paths = []
    if env.get("NCCL_CONF_FILE"):
        paths.append(env["NCCL_CONF_FILE"])
    elif os.environ.get("HOME"):
        paths.append(os.path.join(os.environ["HOME"], ".nccl.conf"))
    paths.append("/etc/nccl.conf")
    files: list[dict[str, object]] = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = fh.read(CONF_MAX).decode("utf-8", "replace")
            files.append({"path": path, "content": text})
        except OSError as exc:
            files.append({"path": path, "content": None, "error": exc.strerror or str(exc)})
    return {"env": env, "files": files}


def measure(args: argparse.Namespace) -> int:
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    node_rank = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
    lead = local_rank == 0
    if lead:
        emit("started", node_rank=node_rank, hostname=socket.gethostname())
    try:
        return _measure(args, rank, local_rank, node_rank)
    except Exception as exc:
        emit("error", rank=rank, node_rank=node_rank, hostname=socket.gethostname(),
             message=f"{type(exc).__name__}: {exc}")
        return 1


def _measure(  # noqa: PLR0915 - one timed loop, kept in one piece to read like BenchTime
        args: argparse.Namespace, rank: int, local_rank: int, node_rank: int) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "nccl" and local_rank == 0:
        emit("nccl_env", **nccl_inputs())
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    t0 = time.perf_counter()
    kwargs: dict[str, object] = {"backend": backend,
                                 "timeout": datetime.timedelta(seconds=args.timeout)}
    if backend == "nccl":
        kwargs["device_id"] = device
    try:
        dist.init_process_group(**kwargs)
    except TypeError:
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)
    world = dist.get_world_size()

    def sync() -> None:
        if backend == "nccl":
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if backend == "nccl":
            dist.barrier(device_ids=[local_rank])
        else:
            dist.barrier()
        sync()

    barrier()
    if rank == 0:
        info: dict[str, object] = {"backend": backend, "world": world,
                                   "init_s": round(time.perf_counter() - t0, 3),
                                   "torch": torch.__version__}
        if backend == "nccl":
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        emit("init", **info)
    if local_rank == 0:
        name = torch.cuda.get_device_name(device) if backend == "nccl" else "cpu"
        emit("node", node_rank=node_rank, hostname=socket.gethostname(), device=name,
             local_world=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))

    elem = 4  # float32, nccl-tests' "float"
    use_graph = backend == "nccl" and args.launch in ("auto", "graph")
    coll = args.collective
    for nbytes in args.sizes:
        count = elements(coll, nbytes // elem, world)
        # The buffers of one size, allocated before timing. Zeros keep their values
        # fixed through back-to-back in-place sums (no growth to inf).
        bufs = _buffers(coll, count, world, torch, device)
        op = _op(coll, bufs, dist)
        graph: Any = None
        if use_graph:
            try:
                graph = _capture(op, args.warmup, args.iters, torch)
            except RuntimeError as exc:
                if args.launch == "graph":
                    raise
                use_graph = False
                if rank == 0:
                    emit("note", message=f"CUDA graph capture failed, timing eager ops: {exc}")
        if graph is None:
            for _ in range(args.warmup):
                op()
        else:
            # One untimed replay first: a graph's first replay pays its upload and first
            # launch, which made the first size of a sweep read low (0.35 of nccl-tests
            # at 1 MiB on H200). The timed replay below is then a warm one, like every
            # other size's. In-place sums of zeros stay zeros, so the data is unchanged.
            graph.replay()
        barrier()
        # nccl-tests' BenchTime: `iters` ops back to back, one wait, host wall time.
        # A size gets as many such rounds as fit in ROUNDS_S at the first round's pace
        # (the slowest rank's, so every rank runs the same number of collectives), at
        # most MAX_ROUNDS, and the median round is the measurement: a round of a small
        # size is a millisecond or less, which a clock tick or a GPU clock change moves
        # by 10 %, while a large size's round is long and steady on its own.
        def timed_round(graph: Any, op: Any) -> float:
            start = time.perf_counter()
            if graph is not None:
                graph.replay()
            else:
                for _ in range(args.iters):
                    op()
            sync()
            return float((time.perf_counter() - start) / args.iters)

        rounds = [timed_round(graph, op)]
        pace = torch.tensor([rounds[0] * args.iters], dtype=torch.float64, device=device)
        dist.all_reduce(pace, op=dist.ReduceOp.MAX)
        wanted = min(MAX_ROUNDS, max(1, math.ceil(ROUNDS_S / max(float(pace.item()), 1e-9))))
        while len(rounds) < wanted:
            rounds.append(timed_round(graph, op))
        # Every rank's rounds, after timing: one small all_gather (every rank runs the
        # same number of rounds), the rows nccl-tests -I gathers as
        # per_process_max_times_us (src/common.cu, GatherProcessMaxIterTimes). The
        # controller derives the per-round statistics and the straggler from them.
        rows = _gather_rounds(rounds, world, dist, torch, device)
        # Mean over ranks, as nccl-tests does by default (each rank's median, fastest
        # and slowest round).
        seconds = sum(statistics.median(r) for r in rows) / world
        fastest = sum(min(r) for r in rows) / world
        slowest = sum(max(r) for r in rows) / world
        wrong = _check(coll, bufs, rank, world, dist)
        if local_rank == 0:
            emit("progress", node_rank=node_rank, bytes=count * elem)
        if rank == 0:
            algbw, busbw = bandwidths(count * elem, seconds, world, coll)
            emit("size", bytes=count * elem, count=count, type="float",
                 time_us=seconds * 1e6, algbw=algbw, busbw=busbw,
                 wrong=wrong, world=world, launch="graph" if graph is not None else "eager",
                 rounds=len(rounds), time_us_min=fastest * 1e6, time_us_max=slowest * 1e6,
                 round_us=[[round(t * 1e6, 3) for t in r] for r in rows])
        del graph, bufs, op
    barrier()
    if rank == 0:
        emit("done", world=world)
    if not _all_left(dist, rank, world):
        dist.destroy_process_group()
    else:
        # Every rank's last kernel is done: exit at once (the process's end frees what NCCL
        # and CUDA hold). Nothing buffered may be lost, and nothing is torn down twice.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _gather_rounds(rounds: list[float], world: int, dist: Any, torch: Any,
                   device: Any) -> list[list[float]]:
    """Every rank's round times (seconds per op), in rank order."""
    mine = torch.tensor(rounds, dtype=torch.float64, device=device)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [[float(x) for x in t.tolist()] for t in out]


def _all_left(dist: Any, rank: int, world: int, *, limit_s: float = 10.0) -> bool:
    """The handshake that lets the ranks skip ``destroy_process_group`` (0.4 s on H200).

    A rank's memory must stay mapped until every peer's last kernel is done: the final
    barrier returns on one rank while a peer's copy of it may still read that rank's
    buffers. Each rank counts itself in on the run's store (the TCP store of
    ``init_process_group``, not NCCL) after its own barrier and GPU sync, and waits for
    all; the store's host (rank 0) waits until every other rank has seen that, so no rank
    is left asking a store that is gone. False: the store could not be used, so the
    caller ends the slow, safe way."""
    try:
        store = dist.distributed_c10d._get_default_store()
        if store.add("nodetune/left", 1) == world:
            store.set("nodetune/all-left", "1")
        store.wait(["nodetune/all-left"])
        if rank != 0:
            store.add("nodetune/seen", 1)
            return True
        deadline = time.monotonic() + limit_s
        while store.add("nodetune/seen", 0) < world - 1:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True
    except Exception:  # an old torch without the store's API: destroy as before
        return False


def bus_factor(collective: str, world: int) -> float:
    """nccl-tests' bus factor (src/<collective>.cu, <Collective>GetBw): 2(n-1)/n for
    all_reduce; (n-1)/n for all_gather, reduce_scatter and alltoall."""
    return (2.0 if collective == "all_reduce" else 1.0) * (world - 1) / world


def bandwidths(nbytes: int, seconds: float, world: int,
               collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in GB/s as nccl-tests reports them: the size's bytes / 1e9 / t
    (all_gather's received and reduce_scatter's sent bytes: the whole buffer), and that
    times the collective's bus factor."""
    algbw = nbytes / 1e9 / seconds
    return algbw, algbw * bus_factor(collective, world)


def elements(collective: str, count: int, world: int) -> int:
    """The float32 elements of a size's whole buffer: all_reduce's ``count``; the others'
    rounded down to a whole chunk per rank, as nccl-tests does (count / nranks * nranks)."""
    if collective == "all_reduce":
        return max(1, count)
    return max(1, count // world) * world


def _buffers(collective: str, count: int, world: int, torch: Any, device: Any) -> tuple[Any, Any]:
    """(input, output) of one size; all_reduce works in place on one buffer."""
    def zeros(n: int) -> Any:
        return torch.zeros(n, dtype=torch.float32, device=device)

    chunk = count // world
    if collective == "all_reduce":
        buf = zeros(count)
        return buf, buf
    if collective == "all_gather":
        return zeros(chunk), zeros(count)
    if collective == "reduce_scatter":
        return zeros(count), zeros(chunk)
    return zeros(count), zeros(count)  # alltoall: one chunk to each rank, one from each


def _op(collective: str, bufs: tuple[Any, Any], dist: Any) -> Any:
    """One call of the collective on ``bufs``."""
    inp, out = bufs
    if collective == "all_reduce":
        return lambda: dist.all_reduce(out)
    if collective == "all_gather":
        return lambda: dist.all_gather_into_tensor(out, inp)
    if collective == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(out, inp)
    return lambda: dist.all_to_all_single(out, inp)


def _capture(op: Any, warmup: int, iters: int, torch: Any) -> object:
    """Record ``iters`` calls of the collective ``op`` in one CUDA graph.

    Replaying it issues the same NCCL kernels back to back with no per-call
    Python/c10d cost, which is what nccl-tests' C loop approaches. The
    warmup runs eagerly on a side stream first, as CUDA graph capture requires.
    """
    cuda = torch.cuda
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for _ in range(max(warmup, 1)):
            op()
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for _ in range(iters):
            op()
    cuda.synchronize()
    return graph


def pattern(index: Any, rank: int) -> Any:
    """Rank ``rank``'s values at ``index``: small integers (1-8), so sums are exact in float32."""
    return index.add(3 * rank).remainder_(8).add_(1)


def expected(collective: str, index: Any, rank: int, world: int, torch: Any) -> Any:
    """What rank ``rank``'s output holds after one collective of ``pattern`` inputs over
    ``index``, the whole buffer's element indices."""
    chunk = index.numel() // world
    if collective == "all_gather":  # every rank's chunk 0, in rank order
        return torch.cat([pattern(index[:chunk], r) for r in range(world)])
    mine = index[rank * chunk:(rank + 1) * chunk]
    if collective == "reduce_scatter":  # the sum of every rank's chunk ``rank``
        return sum(pattern(mine, r) for r in range(world))
    if collective == "alltoall":  # chunk ``rank`` of each rank, in rank order
        return torch.cat([pattern(mine, r) for r in range(world)])
    return sum(pattern(index, r) for r in range(world))


def _check(collective: str, bufs: tuple[Any, Any], rank: int, world: int, dist: Any) -> int:
    """Load :func:`pattern` per rank, run the collective once, count wrong output elements
    over all ranks."""
    import torch

    inp, out = bufs
    whole = max(inp.numel(), out.numel())
    index = torch.arange(whole, dtype=torch.int32, device=out.device)
    inp.copy_(pattern(index[:inp.numel()], rank))
    _op(collective, bufs, dist)()
    want = expected(collective, index, rank, world, torch).to(out.dtype)
    wrong = torch.tensor([int((out != want).sum().item())], dtype=torch.int64, device=out.device)
    dist.all_reduce(wrong)
    return int(wrong.item())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodetune-worker")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--master", default="")
    p.add_argument("--free-port", action="store_true")
    p.set_defaults(fn=serve)
    p = sub.add_parser("launch")
    p.add_argument("--remove-after", type=float, default=GUARD_REMOVE_AFTER_S)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=launch)
    p = sub.add_parser("reap")
    p.add_argument("token")
    p.add_argument("--group", type=int)
    p.add_argument("--remove")
    p.set_defaults(fn=reap_cmd)
    p = sub.add_parser("ras")
    p.add_argument("--addr", default=None)
    p.add_argument("--timeout", type=float, default=15.0)
    p.set_defaults(fn=ras_cmd)
    p = sub.add_parser("measure")
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--launch", choices=("auto", "graph", "eager"), default="auto")
    p.add_argument("--collective", choices=protocol.COLLECTIVES, default="all_reduce")
    p.set_defaults(fn=measure)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
