"""``nccl.effective`` in ``nodetune check``: the one-node all_reduce's NCCL log, held to
what nccl_config and ``nodetune_env`` set (:mod:`nodetune.measure.nccl_effective`).

It costs no run of its own: the sweep's ranks already log ``INIT,ENV``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodetune.ansible.inventory import Host
from nodetune.check.model import CheckResult, HelpLines, failed, passed, warned
from nodetune.measure import nccl_effective

NAME = nccl_effective.NAME
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("nccl.effective",
     "the same run's NCCL INIT,ENV log: every NCCL_* value nccl_config and",
     "nodetune_env set was used by NCCL (fails naming the value NCCL used and",
     "its source; warns where NCCL logged no ENV line)"),
)
EXPECTED = "every NCCL_* value nccl_config and nodetune_env set, used by NCCL"
SOURCE = ("NCCL's INIT,ENV log ('set by environment to'; NVIDIA/nccl src/misc/param.cc), "
          "nccl_config settings, nodetune_env")
SHOWN = 8  # values named in the measured column at most


def judge(host: Host, lines: Sequence[str], *, run_env: Mapping[str, str],
          inventory_env: Mapping[str, str]) -> CheckResult:
    """The check for a sweep run on ``host``: its ranks' output ``lines``, the environment
    the run set (``run_env``) and the one the inventory asks for (``inventory_env``)."""
    eff, verdict, unread = nccl_effective.assess_node(
        host, lines, run_env=run_env, inventory_env=inventory_env)
    shown = [f"{s.name}={s.value} ({s.source})" for s in eff.settings[:SHOWN]]
    more = len(eff.settings) - SHOWN
    measured = ("; ".join(shown) + (f"; and {more} more" if more > 0 else "")
                or "no NCCL_* value reported")
    if eff.version:
        measured = f"NCCL {eff.version}: {measured}"
    note = f"; {unread}" if unread else ""
    if verdict.problems:
        return failed(NAME, measured, EXPECTED, SOURCE, "; ".join(verdict.problems) + note)
    if verdict.unassessed:
        return warned(NAME, measured, EXPECTED, SOURCE, verdict.unassessed + note)
    if unread:
        return warned(NAME, measured, EXPECTED, SOURCE, unread)
    said = (f"not logged by NCCL, so not confirmed: {', '.join(verdict.unconfirmed)}"
            if verdict.unconfirmed else "")
    return passed(NAME, measured, EXPECTED, SOURCE, said)
