"""check's lists for its ``--help``, from the modules that judge and read them.

The checks (each one's lines from its module, :func:`help_of`): the state checks
(:data:`nodetune.check.run.STATE_CHECKS`), then the signals
(:data:`nodetune.check.health.SIGNALS`), each in report order; then the checks run apart
from the probe and the health reader (:func:`apart`), then --sample's. The inventory
variables (each reader's ``VARS_HELP``): :func:`readers`' in their order."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from nodetune.check.model import HelpLines

NAME_WIDTH = 16  # a check's name column; a longer name is followed by one space
VAR_WIDTH = 32   # a variable's name column; two spaces follow it
SAMPLE_TITLE = "with --sample DURATION, each node read once a second for the window (read-only):"


def help_of(check: Callable[..., Any]) -> HelpLines:
    """A registered check's lines (a ``judge_probe`` or ``judge_signal``): its module's
    ``HELP``, in report order; for ``judge_signal_X``, one of several signals of one module,
    the module's ``HELP_X``, so that each signal's lines stand in its place."""
    name = check.__name__
    suffix = name.removeprefix("judge_signal").upper() if name.startswith("judge_signal_") else ""
    help_lines: HelpLines = getattr(sys.modules[check.__module__], "HELP" + suffix)
    return help_lines


def apart() -> tuple[ModuleType, ...]:
    """The modules of the checks run apart from the probe and the health reader, in --help's
    order (imported here: the node-local health check runs none of them)."""
    from nodetune.check import effective, nccl, versions
    from nodetune.container import probe
    from nodetune.measure import rdma_peer

    return versions, probe, rdma_peer, nccl, effective


def readers() -> tuple[ModuleType, ...]:
    """The modules that read check's inventory variables (besides the roles'), in --help's
    order: the expectations, the workers' environment, the health reader's inputs, the
    fleet's versions, the probe."""
    from nodetune.check import expect, probe, versions
    from nodetune.measure import host_env, node_inputs

    return expect, host_env, node_inputs, versions, probe


def lines(help_lines: HelpLines, *, width: int = NAME_WIDTH, gap: int = 1) -> list[str]:
    """Each name in its column (``width``, then ``gap`` spaces), its text beside it and
    under it."""
    out: list[str] = []
    for name, first, *more in help_lines:
        out.append(f"  {name:<{width}}{' ' * gap}{first}")
        out += [" " * (width + gap + 2) + line for line in more]
    return out


def text() -> str:
    """The list, one line each, as check's ``--help`` shows it."""
    from nodetune.check import health, run, sample

    registered: list[Callable[..., Any]] = [*run.STATE_CHECKS, *health.SIGNALS]
    listed = [*(help_of(check) for check in registered), *(m.HELP for m in apart())]
    return "\n".join([*(line for help_lines in listed for line in lines(help_lines)),
                      f"  {SAMPLE_TITLE}", *lines(sample.HELP)])


def variables_text() -> str:
    """The inventory variables check reads, one line each, as its ``--help`` shows them."""
    return "\n".join(line for m in readers()
                     for line in lines(m.VARS_HELP, width=VAR_WIDTH, gap=2))
