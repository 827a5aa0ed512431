"""The ``launch`` verb: the guard that runs a command in its own session and ends its
group (and, later, the run's temp dir) when the controller goes away."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time

from nodetune.collective.worker.common import RUN_VAR, _exitcode, _name_process, emit
from nodetune.collective.worker.reaper import (
    GUARD_REMOVE_AFTER_S,
    GUARD_WAIT_NAME,
    reap,
    remove_own_run_dir,
)


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
