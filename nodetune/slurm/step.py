"""One srun step of several tasks, read as one process per node.

srun ``--label`` prefixes each task's lines with its task id, and each task first says
which step and node it is (:data:`~nodetune.slurm.commands.STEP_MARK`); this splits the
step's output into a stream per node, so that validate's launcher and watcher follow
each node as they follow an SSH command. srun gives every task the same stdin: what is
sent for one node carries its Slurm name (``slurm_node``), and the node's worker skips
what is not its own.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence

from nodetune.remote import ssh
from nodetune.slurm import commands

log = logging.getLogger(__name__)

# srun's own report of a task that ended badly: "srun: error: node-b: task 1: Exited ..."
_TASK_ENDED = re.compile(r"^srun: error: (\S+): tasks? (\d+)(?:-\d+)?: ")


class NodeStream:
    """One node's part of a :class:`PairStep`, shaped like :class:`ssh.Process`."""

    def __init__(self, step: PairStep, node: str) -> None:
        self.step = step
        self.node = node
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.ended = False
        self.closed = False

    def lines(self) -> Iterator[str]:
        while not self.ended:
            line = self.queue.get()
            if line is None:
                self.ended = True
                return
            yield line

    def poll(self) -> int | None:
        return self.step.proc.poll() if self.step.done.is_set() else None

    def send(self, data: bytes) -> None:
        """Send one JSON line meant for this node (it is marked with the node's name)."""
        out = b""
        for raw in data.splitlines():
            if raw.strip():
                doc = json.loads(raw)
                doc["slurm_node"] = self.node
                out += json.dumps(doc).encode() + b"\n"
        self.step.proc.send(out)

    def close(self) -> None:
        self.closed = True
        self.step.closed_one()


class PairStep:
    """A running ``srun --label`` step: one :class:`NodeStream` per node."""

    def __init__(self, proc: ssh.Process, nodes: Sequence[str], *, where: str,
                 on_mark: Callable[[str], None] = lambda _s: None) -> None:
        self.proc = proc
        self.where = where
        self.nodes = tuple(nodes)
        self.streams = {n: NodeStream(self, n) for n in nodes}
        self.tasks: dict[int, str] = {}
        self.job_step: str | None = None
        self.on_mark = on_mark  # told the step's "job.step" id once a task says it
        self.srun_lines: list[str] = []
        self.done = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def stream(self, node: str) -> NodeStream:
        return self.streams[node]

    def _read(self) -> None:
        try:
            for line in self.proc.lines():
                self._route(line)
        except Exception as exc:  # a dropped channel ends the stream too
            log.debug("step on %s: output ended: %s", self.where, exc)
        finally:
            self.done.set()
            for s in self.streams.values():
                s.queue.put(None)

    def _route(self, line: str) -> None:
        found = commands.labelled(line)
        if found is None:  # srun's own line: the node it names, else every node
            self.srun_lines.append(line)
            ended = _TASK_ENDED.match(line)
            named = [s for n, s in self.streams.items() if ended and n == ended.group(1)]
            for s in named or self.streams.values():
                s.queue.put(line)
            return
        task, text = found
        mark = commands.step_mark(text)
        if mark is not None and mark[2] in self.streams:
            with self._lock:
                self.tasks[task] = mark[2]
                if self.job_step is None:
                    self.job_step = f"{mark[0]}.{mark[1]}"
                    self.on_mark(self.job_step)
            return
        node = self.tasks.get(task)
        if node is not None:
            self.streams[node].queue.put(text)
        else:
            for s in self.streams.values():
                s.queue.put(text)

    def closed_one(self) -> None:
        """When every node's stream is closed, close srun's stdin: the workers' launch
        guards see EOF and stop their ranks."""
        if all(s.closed for s in self.streams.values()):
            try:
                self.proc.close()
            except Exception as exc:  # closing a dead channel must not stop the cleanup
                log.debug("step on %s: closing: %s", self.where, exc)

    def wait(self, timeout: float) -> bool:
        """Whether srun ended within ``timeout`` seconds."""
        return self.done.wait(timeout)
