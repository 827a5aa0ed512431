"""Stop what a validation started on its nodes and remove its temp dirs, whatever happened.

Each node is cleaned over the run's own connection, else a fresh one with a short
timeout; every node at once, within a budget, so that a node that blocks its cleanup
cannot hold the run's end back. What could not be removed is said, with the run id
by which the next validate reaching that node removes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from nodetune.collective.nodes import (
    ANSWER_TIMEOUT,
    CLEANUP_BUDGET,
    CLEANUP_TIMEOUT,
    OnValidateEvent,
    RunNode,
    ValidateEvent,
    answers,
    tail,
)
from nodetune.collective.worker_cmd import WORKER_NAME
from nodetune.container import runtime as ct
from nodetune.errors import LaunchError, NodetuneError
from nodetune.measure import protocol
from nodetune.remote import ssh_executor
from nodetune.remote.executor import Command, NodeRunner, kill_group

log = logging.getLogger(__name__)


def _clean_at_once(runner: NodeRunner, n: RunNode, run_id: str) -> bool:
    """The whole cleanup in one command the node's worker runs: stop the launch group
    (polled there, not by round trips), kill what carries the run's id, remove the temp
    dir. False when it could not say all of that was done (the caller then does it step
    by step)."""
    if not n.tmpdir or n.proc is None:
        return False
    argv = [n.plan.python, f"{n.tmpdir}/{WORKER_NAME}", "reap", run_id, "--remove", n.tmpdir]
    if n.pgid is not None:
        argv += ["--group", str(n.pgid)]
    done = runner.run(Command(argv, cwd="/"), timeout=CLEANUP_TIMEOUT)
    event = protocol.last_events(done.stdout.splitlines()).get("reaped", {})
    if done.exit_status != 0 or event.get("removed") is not True or event.get("group_alive"):
        log.debug("%s: one-step cleanup did not finish (exit %s, %s): step by step",
                  n.name, done.exit_status, event or tail(done.stderr))
        return False
    if event.get("count"):
        log.warning("%s: killed %s leftover worker process(es)", n.name, event["count"])
    if event.get("lingering"):  # did not leave: a process stuck in the kernel, or a guard
        log.warning("%s: %s process(es) of run %s still there after the cleanup "
                    "(the next validate that reaches the node ends them, by run id)",
                    n.name, event["lingering"], run_id)
    return True


def _remove_containers(runner: NodeRunner, n: RunNode, run_id: str) -> str | None:
    """Remove this run's containers on ``n`` and look again (a ``docker run`` client's end
    does not stop its container); None when none is left, else what is."""
    c = n.container
    assert c is not None
    gone = runner.run(Command(ct.rm_argv(c, run_id, n.rank)), timeout=CLEANUP_TIMEOUT)
    left = runner.run(Command(ct.left_argv(c, run_id)), timeout=CLEANUP_TIMEOUT)
    if left.exit_status == 127:  # no such runtime on the node: it started no container
        return None
    if left.exit_status == 0 and not left.stdout.split():
        return None
    names = ", ".join(left.stdout.split()) if left.exit_status == 0 else "?"
    return (f"{c.runtime} container(s) of this run still there ({names}): "
            f"{tail(gone.stderr or left.stderr) or 'rm -f did not remove them'}")


def _clean_with(runner: NodeRunner, n: RunNode, run_id: str) -> None:
    # Containers first (they hold the GPUs and the worker's directory), but whatever
    # happens to them, the processes and the temp dir are still cleaned.
    kept = _remove_containers(runner, n, run_id) if n.container is not None else None
    _clean_processes_and_dir(runner, n, run_id)
    if kept:
        raise LaunchError(kept, host=n.name)


def _clean_processes_and_dir(runner: NodeRunner, n: RunNode, run_id: str) -> None:
    if _clean_at_once(runner, n, run_id):
        return
    if n.pgid is not None and not kill_group(runner, n.pgid):
        log.warning("%s: process group %d still alive after SIGKILL", n.name, n.pgid)
    if n.tmpdir and n.proc is not None:
        # A rank that left the guard's group (a session of its own) is still marked
        # with the run's id: sweep by it.
        swept = runner.run(Command([n.plan.python, WORKER_NAME, "reap", run_id], cwd=n.tmpdir),
                           timeout=CLEANUP_TIMEOUT)
        reaped = protocol.last_events(swept.stdout.splitlines()).get(
            "reaped", {}).get("count")
        if reaped:
            log.warning("%s: killed %s leftover worker process(es)", n.name, reaped)
    if n.tmpdir:
        gone = runner.run(Command(["rm", "-rf", "--", n.tmpdir]), timeout=CLEANUP_TIMEOUT)
        if gone.exit_status != 0:
            raise LaunchError(f"rm -rf {n.tmpdir} failed: {tail(gone.stderr)}", host=n.name)


def close_worker(n: RunNode) -> None:
    """Close the stdin of ``n``'s worker (its launch guard kills its group on EOF); a
    dead channel is no error."""
    assert n.proc is not None
    try:
        n.proc.close()
    except Exception as exc:  # closing a dead channel must not stop the cleanup
        log.debug("%s: closing the worker's channel: %s", n.name, exc)


def _clean_node(n: RunNode, run_id: str, stop: Callable[[RunNode], None]) -> str | None:
    """Stop what this run started on ``n`` (``stop``: close its worker's stdin) and
    remove its temp dir.

    The run's own connection is tried first; if it no longer answers (a wedged
    channel, a dropped connection), a fresh one with a short timeout. Returns
    None when the node is clean, else what is left there and why.
    """
    runner = n.runner
    assert runner is not None
    over = ssh_executor.of(runner)  # under Slurm the step's clean-up is srun's
    if n.proc is not None:
        stop(n)  # the launch guard kills its group on EOF as well
    if n.tmpdir is None and n.pgid is None and n.proc is None:
        over.close_one(n.name)
        return None
    errors: list[str] = []
    # A node that just failed to answer (frozen) gets one brief try on a new connection,
    # so that the run ends within --timeout + 15 s; what is left, the next run removes.
    attempts = ("a new connection",) if n.silent else ("this run's connection",
                                                       "a new connection")
    for attempt in attempts:
        try:
            if attempt == "a new connection":
                over.reconnect(n.name, n.plan.host, timeout=ANSWER_TIMEOUT if n.silent
                               else CLEANUP_TIMEOUT)
            elif not answers(runner):
                errors.append(f"{attempt} does not answer")
                continue
            _clean_with(runner, n, run_id)
            over.close_one(n.name)
            return None
        except (NodetuneError, OSError) as exc:
            errors.append(f"{attempt}: {getattr(exc, 'message', None) or exc}")
    over.close_one(n.name)
    return f"{_left(n, run_id)}: {'; '.join(errors)}"


def _left(n: RunNode, run_id: str) -> str:
    """What this run may have left on ``n``, and what removes it."""
    left = [f"temp dir {n.tmpdir}"] if n.tmpdir else []
    if n.proc is not None:
        left.append(f"worker processes of run {run_id} (the launch guard ends them when "
                    "the node notices the connection is gone)")
    said = (f"{' and '.join(left)} left on the node (the next validate that reaches it "
            f"removes them, by run id {run_id})")
    if n.container is not None:
        said += (f"; its {n.container.runtime} containers are labelled "
                 f"{ct.LABEL}={run_id}: `{n.container.runtime} rm -f` them")
    return said


def cleanup(nodes: Sequence[RunNode], progress: OnValidateEvent, run_id: str, *,
            stop: Callable[[RunNode], None] = close_worker) -> dict[str, str]:
    """Clean both nodes at once, and say which ones could not be cleaned and what is left;
    ``stop`` closes a node's worker first (its launcher's stop of that node).

    Returns:
        What is left on each node that could not be cleaned.
    """
    touched = [n for n in nodes if n.runner is not None]
    if not touched:
        return {}
    done: dict[str, str | None] = {}

    def clean_one(n: RunNode) -> None:
        done[n.name] = _clean_node(n, run_id, stop)

    # Daemon threads, waited on up to a budget: a node that blocks the cleanup in a way
    # no timeout above catches still cannot hold the run's end (its exit code) back.
    threads = [threading.Thread(target=clean_one, args=(n,), daemon=True) for n in touched]
    for t in threads:
        t.start()
    deadline = time.monotonic() + CLEANUP_BUDGET
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    left = {n.name: done[n.name] if n.name in done else (
        f"{_left(n, run_id)}: cleanup did not finish within {CLEANUP_BUDGET:g} s")
        for n in touched}
    for name, what in left.items():
        if what:
            log.warning("%s: cleanup could not reach the node: %s", name, what)
            progress(ValidateEvent("cleanup", f"could not clean up: {what}", name))
    clean = [name for name, what in left.items() if not what]
    if clean and len(clean) == len(left):
        progress(ValidateEvent("cleanup", "stopped remote processes, removed temp dirs"))
    elif clean:
        progress(ValidateEvent("cleanup", "stopped remote processes, removed temp dirs",
                               clean[0]))
    return {name: what for name, what in left.items() if what}
