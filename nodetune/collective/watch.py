"""Follow the nodes' workers until they finish, stall or die, and name the node at fault.

The watcher reads every line both workers print, turns protocol events into results
and progress, and restarts the deadline on each sign of progress. When the output
stops, it asks the nodes over SSH who is frozen, stopped or behind; when a worker dies,
it waits a moment for its peer so that the node at fault is named, not its victim.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nodetune.collective.answers import checked_pgid, size_from
from nodetune.collective.nodes import (
    ANSWER_TIMEOUT,
    OnValidateEvent,
    RunNode,
    ValidateEvent,
    answers,
    ended,
    tail,
)
from nodetune.collective.worker_cmd import WORKER_NAME
from nodetune.errors import LaunchError, NodeTimeout, NodetuneError
from nodetune.measure import protocol
from nodetune.measure.sweep import SizeResult
from nodetune.remote.executor import Command, NodeRunner

log = logging.getLogger(__name__)

_KILLED = re.compile(r"(?:Signal (\d+) \(SIG\w+\) received|exitcode\s*:\s*-(\d+))")
_PEER_GONE = re.compile(r"(?i)connection (?:reset|closed)|broken pipe|peer|recv|Socket Timeout")


class Watch:
    """Follow both nodes' output until the worker finishes, stalls or dies."""

    def __init__(self, nodes: list[RunNode], timeout: float, progress: OnValidateEvent,
                 master: str) -> None:
        self.nodes = nodes
        self.timeout = timeout
        self.progress = progress
        self.master = master
        self.queue: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.results: list[SizeResult] = []
        self.init: dict[str, Any] = {}
        self.done = False

    def _read(self, index: int) -> None:
        proc = self.nodes[index].proc
        assert proc is not None
        try:
            for line in proc.lines():
                self.queue.put((index, line))
        except Exception as exc:  # a dropped SSH channel ends the stream too
            log.debug("%s: output stream ended: %s", self.nodes[index].name, exc)
        self.queue.put((index, None))

    def run(self, phases: dict[str, float], started: float) -> tuple[list[SizeResult],
                                                                      dict[str, Any]]:
        for i in range(len(self.nodes)):
            threading.Thread(target=self._read, args=(i,), daemon=True).start()
        phase, phase_start = "launch", started
        deadline = time.monotonic() + self.timeout
        while not (self.done and all(n.eof for n in self.nodes)):
            remaining = deadline - time.monotonic()
            if self.done:  # finished: give the processes a moment to exit, then move on
                remaining = min(remaining, 15.0)
            try:
                index, line = self.queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                if self.done:
                    break
                raise self._stalled(phase) from None
            node = self.nodes[index]
            if line is None:
                node.eof = True
                node.exit_status = ended(node)
                if not self.done:
                    raise self._died(node, phase)
                continue
            node.lines.append(line)
            event = protocol.decode(line)
            if event is None:
                continue
            if self._handle(node, event):
                deadline = time.monotonic() + self.timeout
            if phase == "launch" and self.init:
                phases["launch"] = time.monotonic() - phase_start
                phase, phase_start = "measure", time.monotonic()
        phases["measure"] = time.monotonic() - phase_start
        init_s = float((self.init or {}).get("init_s") or 0.0)
        if "launch" in phases and 0 < init_s < phases["launch"]:
            # The worker times init_process_group + first barrier (NCCL's set-up).
            phases["launch"] -= init_s
            phases["nccl_init" if (self.init or {}).get("backend") == "nccl" else "init"] = init_s
        return self.results, self.init

    def _handle(self, node: RunNode, event: dict[str, Any]) -> bool:
        try:
            return self._apply(node, event)
        except (KeyError, TypeError, ValueError) as exc:
            raise LaunchError(f"the worker sent a malformed {event.get('event')!r} event "
                              f"({type(exc).__name__}: {exc}): {event}", host=node.name) from None

    def _apply(self, node: RunNode, event: dict[str, Any]) -> bool:
        kind = event.get("event")
        if kind == "launched":
            node.pgid = checked_pgid(int(event["pgid"]), host=node.name)
        elif kind == "started":
            node.started = True
        elif kind == "init":
            self.init = event
            self.progress(ValidateEvent(
                "launch", f"all {event.get('world')} ranks joined ({event.get('backend')}, "
                f"init {event.get('init_s')} s)"))
        elif kind == "node":
            self.progress(ValidateEvent("launch", f"node rank {event.get('node_rank')} on "
                                        f"{event.get('device')} x{event.get('local_world')}",
                                        node.name))
        elif kind == "progress":
            node.progress_bytes = int(event.get("bytes", 0))
        elif kind == "size":
            row = size_from(event)
            self.results.append(row)
            self.progress(ValidateEvent("measure", "size done", size=row))
        elif kind == "done":
            self.done = True
        elif kind == "note":
            self.progress(ValidateEvent("measure", str(event.get("message")), node.name))
        elif kind == "error":
            node.errors.append(str(event.get("message")))
            return False
        else:
            return False
        return True

    def _died(self, first: RunNode, phase: str) -> NodetuneError:
        # The peer of a dead node usually fails a moment later with a socket
        # error; wait briefly so that the node at fault is named, not its victim.
        end = time.monotonic() + 3.0
        while time.monotonic() < end and not all(n.eof for n in self.nodes):
            try:
                index, line = self.queue.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            other = self.nodes[index]
            if line is None:
                other.eof = True
                other.exit_status = ended(other)
            else:
                other.lines.append(line)
                event = protocol.decode(line)
                if event is not None and event["event"] == "error":
                    self._handle(other, event)
        culprit = self._blame(first)
        where = "before all ranks joined" if phase == "launch" else (
            f"after {culprit.progress_bytes} bytes" if culprit.progress_bytes
            else "during the first size")
        detail = "; ".join(culprit.errors[:2]) or tail(
            "\n".join(ln for ln in culprit.lines if protocol.decode(ln) is None
                      and "NCCL INFO" not in ln), 4)
        status = "still running" if culprit.exit_status is None and not culprit.eof else (
            f"exit status {culprit.exit_status}")
        return LaunchError(f"the worker died {where} ({status}): {detail}", host=culprit.name)

    def _blame(self, first: RunNode) -> RunNode:
        def killed(n: RunNode) -> bool:
            return any(_KILLED.search(ln) for ln in n.lines)

        def own_error(n: RunNode) -> bool:
            return bool(n.errors) and not all(_PEER_GONE.search(e) for e in n.errors)

        for test in (killed, own_error):
            hits = [n for n in self.nodes if test(n)]
            if len(hits) == 1:
                return hits[0]
        return first

    def _stalled(self, phase: str) -> NodeTimeout:
        secs = f"{self.timeout:g} s"
        asked = [n for n in self.nodes if n.runner is not None]
        with ThreadPoolExecutor(max_workers=max(1, len(asked))) as pool:
            replies = list(pool.map(lambda n: n.runner is not None and answers(n.runner),
                                    asked))
        silent = [n for n, ok in zip(asked, replies, strict=True) if not ok]
        for n in silent:
            n.silent = True
        if len(silent) == 1:
            n = silent[0]
            return NodeTimeout(f"stopped answering: no progress for {secs} and no answer over "
                               f"SSH within {ANSWER_TIMEOUT:g} s (frozen, overloaded or cut "
                               "off)", host=n.name)
        if len(silent) == 2:
            return NodeTimeout(f"no progress for {secs} and neither node answers over SSH "
                               f"({self.nodes[0].name}, {self.nodes[1].name})")
        stopped = [n for n in self.nodes if n.runner is not None and _stopped_worker(n.runner)]
        if len(stopped) == 1:
            return NodeTimeout(f"stopped answering: no progress for {secs}; a worker process "
                               "there is stopped (state T: SIGSTOP or a debugger)",
                               host=stopped[0].name)
        if phase == "launch":
            silent = [n for n in self.nodes if not n.started]
            if len(silent) == 1:
                n = silent[0]
                return NodeTimeout(f"the worker did not start its ranks within {secs} (forking "
                                     "them or initialising CUDA hung)", host=n.name)
            if not silent:
                other = self.nodes[-1]
                return NodeTimeout(
                    f"the ranks did not all join within {secs}: {other.name} could not complete "
                    f"the rendezvous with {self.nodes[0].name} at {self.master}; check that "
                    f"{other.name} reaches that address (firewall, --master-addr)",
                    host=other.name)
            return NodeTimeout(f"neither node started the worker within {secs}")
        done = [n.progress_bytes for n in self.nodes]
        if len(set(done)) > 1:
            hung = min(self.nodes, key=lambda n: n.progress_bytes)
            return NodeTimeout(f"no progress for {secs}; it stopped after {hung.progress_bytes}"
                                 " bytes while its peer went on", host=hung.name)
        last = f"after {done[0]} bytes" if done[0] else "at the first size"
        names = ", ".join(n.name for n in self.nodes)
        where = (f"on either node ({names}): the all_reduce between them" if len(self.nodes) > 1
                 else f"on {names}: the all_reduce across its ranks")
        return NodeTimeout(
            f"no progress for {secs} {last} {where} never completed; raise "
            "--timeout for large sizes on slow links")


def _stopped_worker(runner: NodeRunner) -> bool:
    """Whether a worker process on ``runner``'s node is stopped (``ps`` state T)."""
    try:
        table = runner.run(Command(["ps", "-eo", "stat=,args="]), timeout=ANSWER_TIMEOUT).stdout
    except (NodetuneError, OSError):
        return False
    return any(line.split(None, 1)[0].startswith("T") and WORKER_NAME in line
               for line in table.splitlines() if line.strip())
