"""What a run leaves on a node, ended: its processes (by run id), its launch group, its
temp dir, and the sweep of earlier runs' leftovers; the ``reap`` verb."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import stat
import time
from typing import Any

from nodetune.collective.worker.common import RUN_VAR, emit


def reap(token: str, sig: int = signal.SIGKILL) -> int:
    """Signal every process whose environment carries ``NODETUNE_RUN_ID=token``.

    torch.distributed.run starts each rank in a session of its own, so a rank
    orphaned by a dead or killed torchrun is outside the launcher's process
    group; the inherited environment marks it wherever it went.
    """
    if not token:
        return 0
    hits = 0
    for pid in carrying(token):
        if _comm(pid) == GUARD_WAIT_NAME:
            continue  # a guard that ended its run: it leaves once its dir is gone
        try:
            os.kill(pid, sig)
            hits += 1
        except OSError:
            continue
    return hits


def _comm(pid: int) -> str:
    """The process's name ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read().strip().decode(errors="replace")
    except OSError:
        return ""


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
# How long the controller's cleanup waits, once it removed the dir, for such a guard to
# leave (it looks every 0.2 s).
LEAVE_WAIT_S = 2.0
# How long a process the cleanup has just SIGKILLed may take to end.
KILLED_S = 0.5


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
    without its trailing slash (:data:`nodetune.collective.answers.MKTEMP`)."""
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


def carrying(token: str) -> list[int]:
    """The live processes here whose environment carries run ``token``'s id (a process
    that has ended has no environment left to read: a zombie is not one)."""
    needle = f"{RUN_VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_gone(token: str, timeout: float = LEAVE_WAIT_S) -> int:
    """Wait up to ``timeout`` for run ``token``'s guards that ended their run to leave
    (each looks every 0.2 s for its dir, gone now); how many of the run's processes are
    still there. Any other process of the run (one SIGKILL did not end: stuck in the
    kernel) is waited for only as long as a process just SIGKILLed takes to end
    (``KILLED_S``)."""
    now = time.monotonic()
    killed, deadline = now + min(KILLED_S, timeout), now + timeout
    while True:
        left = carrying(token)
        now = time.monotonic()
        leaving = left if now < killed else [p for p in left if _comm(p) == GUARD_WAIT_NAME]
        if not leaving or now >= deadline:
            return len(left)
        time.sleep(0.05)


def reap_cmd(args: argparse.Namespace) -> int:
    """End what run ``token`` started here: its launch group (``--group``), any process
    carrying its id, then its temp dir (``--remove``), and say what was done. Once the
    dir is gone it waits for the run's guard to leave, so that when the controller's
    cleanup returns nothing of the run is left on the node (``lingering``: what was still
    there when the wait ended)."""
    result: dict[str, Any] = {}
    if args.group is not None:
        result["group_alive"] = not stop_group(args.group)
    result["count"] = reap(args.token)
    if args.remove:
        result["removed"] = remove_run_dir(args.remove, args.token)
        if result["removed"] and args.token:
            result["lingering"] = wait_gone(args.token)
    emit("reaped", **result)
    return 0
