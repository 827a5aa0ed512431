"""A stand-in for nodetune.remote.executor.Executor where a test reads what one node is
asked to run (``check``'s reads, :meth:`Executor.run_node`): each command is recorded and
answered by the test's function."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nodetune.remote.executor import OVER_SSH, Command, NodeRunner, Ran, Stage, Stream

Answer = Callable[[str, Command, float], Ran]  # (node, command, timeout) -> what it left


class FakeExecutor:
    """Answers each node's command with ``answer`` (which may raise, as a launcher does
    past a timeout) and keeps ``ran``: (node, command, timeout), in the order asked."""

    where = OVER_SSH

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.ran: list[tuple[str, Command, float]] = []
        self.closed = False

    def node(self, name: str) -> NodeRunner:
        """``name``'s :class:`NodeRunner` over this executor."""
        return NodeRunner(self, name)

    def argvs(self, node: str) -> list[list[str]]:
        """The argument lists ``node`` was asked to run."""
        return [list(c.argv) for n, c, _ in self.ran if n == node]

    def run_node(self, node: str, command: Command, *, timeout: float) -> Ran:
        self.ran.append((node, command, timeout))
        return self.answer(node, command, timeout)

    def run(self, commands: Mapping[str, Command], *, name: str, timeout: float,
            stage: Stage, what: str) -> dict[str, Ran]:
        return {n: self.run_node(n, c, timeout=timeout) for n, c in commands.items()}

    def start(self, commands: Mapping[str, Command], *, name: str) -> dict[str, Stream]:
        raise AssertionError("nothing is started here")

    def stage(self, files: Mapping[str, bytes], workdir: str) -> None:
        raise AssertionError("nothing is staged here")

    def stop(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True
