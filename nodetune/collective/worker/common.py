"""What every verb of the worker uses: the protocol module, its lines, process helpers."""

from __future__ import annotations

import contextlib
import os
import sys

try:  # on a node: the protocol module uploaded beside this file
    import nodetune_protocol as protocol  # type: ignore[import-not-found]
except ImportError:  # imported or run from the package
    from nodetune.measure import protocol

RUN_VAR = protocol.RUN_VAR


def emit(event: str, **fields: object) -> None:
    """Print one protocol line and flush it at once."""
    sys.stdout.write(protocol.encode(event, **fields))
    sys.stdout.flush()


def _exitcode(status: int) -> int:
    """A wait status as an exit code, negative for a signal (os.waitstatus_to_exitcode, 3.9+)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _name_process(name: str) -> None:
    """Set the process name ``ps -o comm`` and ``pgrep`` show (Linux; best effort)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as fh:
        fh.write(name[:15])
