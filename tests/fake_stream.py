"""A stand-in for nodetune.remote.executor.Stream, a started command's SSH channel (or
srun's): output lines the test queues, and an exit status."""

from __future__ import annotations

import queue
from collections.abc import Iterator


class FakeStream:
    """Stands in for nodetune.remote.executor.Stream (the SSH channel of a started command):
    ``lines`` yields what is put on ``queue`` until a None, ``poll`` is ``status``.

    ``send`` and ``close``, what the command does with its stdin, are a subclass's.
    """

    def __init__(self) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.status: int | None = None

    def end(self, status: int) -> None:
        """The command exits with ``status``: its output ends after what is queued."""
        self.status = status
        self.queue.put(None)

    def lines(self) -> Iterator[str]:
        while (text := self.queue.get()) is not None:
            yield text

    def poll(self) -> int | None:
        return self.status
