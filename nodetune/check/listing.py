"""check's list of checks for its ``--help``, from the checks' own modules (each module's
``HELP``): the state checks in report order (:data:`nodetune.check.run.STATE_CHECKS`), the
signals in report order (:data:`nodetune.check.health.SIGNALS`), the checks run apart from
the probe and the health reader (:func:`apart`), then --sample's."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from nodetune.check.model import HelpLines

NAME_WIDTH = 16  # a check's name column; a longer name is followed by one space
SAMPLE_TITLE = "with --sample DURATION, each node read once a second for the window (read-only):"


def modules_of(checks: Iterable[Callable[..., Any]]) -> list[ModuleType]:
    """The modules of these judge functions, each once, in their order."""
    seen: dict[str, ModuleType] = {}
    for fn in checks:
        seen.setdefault(fn.__module__, sys.modules[fn.__module__])
    return list(seen.values())


def apart() -> tuple[ModuleType, ...]:
    """The modules of the checks run apart from the probe and the health reader, in --help's
    order (imported here: the node-local health check runs none of them)."""
    from nodetune.check import effective, nccl, versions
    from nodetune.container import probe
    from nodetune.measure import rdma_peer

    return versions, probe, rdma_peer, nccl, effective


def lines(help_lines: HelpLines) -> list[str]:
    """Each check's name in its column, its text beside it and under it."""
    out: list[str] = []
    for name, first, *more in help_lines:
        out.append(f"  {name:<{NAME_WIDTH}} {first}")
        out += [" " * (NAME_WIDTH + 3) + line for line in more]
    return out


def text() -> str:
    """The list, one line each, as check's ``--help`` shows it."""
    from nodetune.check import health, run, sample

    listed = [*modules_of(run.STATE_CHECKS), *modules_of(health.SIGNALS), *apart()]
    return "\n".join([*(line for m in listed for line in lines(m.HELP)),
                      f"  {SAMPLE_TITLE}", *lines(sample.HELP)])
