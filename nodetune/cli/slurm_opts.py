"""--drain/--resume/--dry-run for the verbs that end in per-node verdicts (check, validate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from nodetune.errors import InputError
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions

F = TypeVar("F", bound=Callable[..., Any])

HELP = """\b
Slurm (--drain, --resume):
  --drain drains every node whose verdict is bad, naming the test and the run:
    scontrol update nodename=N state=drain reason="nodetune <verb> <run id>: <why>"
  (reason: one printable line, at most 255 bytes, as slurmdbd's node events
  keep). Unresolved or unreachable nodes are drained only with
  --drain-unreachable. A node already drained for another reason, or by the
  other verb, keeps its reason.
  --resume returns a node with a good verdict to service only if it was
  drained before this run started (named or not) and either its drain or
  down reason matches --resume-reason REGEX, or a run of the SAME verb
  drained it: the reason names a run whose record (under .nodetune/runs)
  drained this node with this reason. A validate drain records its pass mark
  (busbw GB/s, size, test, forced algorithm, expected transport, --rdma-bw);
  only a pass at least as strict lifts it (a run with no pass mark never
  lifts one that had a busbw mark). A check pass never lifts a validate
  drain, the health check's drains ("nodetune healthcheck: ...") come back
  only through the health check or a --resume-reason naming them, and a
  reason merely shaped like nodetune's is nobody's; any other drained node,
  or one whose state Slurm holds (reboot, power saving, maintenance), is left
  as it is and listed with its reason.
  --dry-run runs and judges as usual, then prints the scontrol commands it
  would run and changes nothing in Slurm (report.json: "dry_run": true).
  The state read back after each action is in report.json's "slurm" section.
  A failed scontrol gives exit 3.
  nodetune_slurm_controller  inventory host that runs scontrol (default: here)
  nodetune_slurm_nodename    the node's Slurm name (default: inventory name)
"""

BUSY_HELP = """\b
Busy nodes: where Slurm is configured (nodetune_slurm_controller is set, or
this machine has sinfo), nodes that Slurm has allocated to jobs (ALLOCATED or
MIXED, --partners' included) are refused with their job ids (exit 2), before
anything runs on a node, unless --allow-busy is given (check: over SSH; its
--launcher slurm runs in its own exclusive allocation). Over SSH nothing holds
the nodes, so Slurm is asked again when the measurement is over: a node
that holds a job then gives no verdict, nor do the nodes measured with it
(unresolved, "allocated to job N during the run"; never drained or resumed;
report.json's "slurm_recheck"; exit 1 where all else passed). A job that
starts and ends between the two questions is not seen: a long run that must
hold its nodes uses --launcher slurm.
"""


def drain_unknown_option(fn: F) -> F:
    """``check``'s ``--drain-unknown`` (keyword ``drain_unknown``): only its verdicts can be
    not assessed."""
    return click.option(
        "--drain-unknown", is_flag=True,
        help="With --drain, also drain nodes not assessed (a check's tool hung or crashed, "
             "nothing failed: exit 5).")(fn)


def drain_reboot_option(fn: F) -> F:
    """``check``'s ``--drain-reboot`` (keyword ``drain_reboot``)."""
    return click.option(
        "--drain-reboot", is_flag=True,
        help="With --drain, a node whose action is reboot is drained by Slurm's reboot "
             "(scontrol reboot ASAP nextstate=RESUME): its jobs end, it reboots, and it "
             "returns to service.")(fn)


def slurm_options(fn: F) -> F:
    """Add the Slurm options to a click command (keyword arguments ``drain`` ... ``dry_run``)."""
    for decorator in reversed([
        click.option("--drain", is_flag=True,
                     help="Drain nodes whose verdict is bad, with a 'nodetune <verb> <run id>:' "
                          "reason."),
        click.option("--drain-unreachable", is_flag=True,
                     help="With --drain, also drain unresolved and unreachable nodes."),
        click.option("--resume", is_flag=True,
                     help="Return good nodes to service if nodetune drained them "
                          "(or --resume-reason matches their reason)."),
        click.option("--resume-reason", metavar="REGEX",
                     help="With --resume, also resume nodes whose drain reason matches "
                          "(e.g. the maintenance reason you set), if drained before the "
                          "run started."),
        click.option("--service-after", type=int, default=3, metavar="N",
                     help="--resume skips nodes drained N times in 7d."),
        click.option("--dry-run", is_flag=True,
                     help="With --drain/--resume: print the scontrol commands, change "
                          "nothing in Slurm."),
    ]):
        fn = decorator(fn)
    return fn


def busy_option(fn: F) -> F:
    """Add ``--allow-busy`` (keyword argument ``allow_busy``) to a click command."""
    return click.option("--allow-busy", is_flag=True,
                        help="Test nodes that Slurm has allocated to jobs (refused "
                             "otherwise, with their job ids).")(fn)


def launcher_options(fn: F) -> F:
    """Add ``--launcher`` and the allocation's options (keyword arguments ``launcher`` ...
    ``slurm_wait``) to a click command."""
    for decorator in reversed([
        click.option("--launcher", type=click.Choice(["ssh", "slurm"]), default="ssh",
                     show_default=True,
                     help="slurm: srun steps in one exclusive salloc of the nodes, from "
                          "nodetune_slurm_controller."),
        click.option("--partition", metavar="NAME", help="--launcher slurm: salloc --partition."),
        click.option("--reservation", metavar="NAME",
                     help="--launcher slurm: salloc --reservation."),
        click.option("--account", metavar="NAME", help="--launcher slurm: salloc --account."),
        click.option("--time-limit", metavar="TIME",
                     help="--launcher slurm: salloc --time [default: the longest "
                          "--timeout lets the run take, + 5 min]."),
        click.option("--slurm-gres", metavar="SPEC",
                     help="--launcher slurm: salloc --gres (e.g. gpu:8)."),
        click.option("--slurm-wait", type=click.IntRange(1), default=60, metavar="S",
                     help="--launcher slurm: salloc --immediate (default 60 s)."),
    ]):
        fn = decorator(fn)
    return fn


def launcher_from(kwargs: dict[str, Any]) -> AllocOptions | None:
    """Pop the launcher options; None for ``--launcher ssh``.

    Raises:
        InputError: an allocation option without ``--launcher slurm``, or a value Slurm
            cannot take.
    """
    launcher = kwargs.pop("launcher", "ssh")
    options = AllocOptions(partition=kwargs.pop("partition", None),
                           reservation=kwargs.pop("reservation", None),
                           account=kwargs.pop("account", None),
                           time_limit=kwargs.pop("time_limit", None),
                           gres=kwargs.pop("slurm_gres", None),
                           wait_s=int(kwargs.pop("slurm_wait", 60)))
    if launcher != "slurm":
        given = [f"--{k.replace('_', '-')}" for k in ("partition", "reservation", "account",
                                                      "time_limit")
                 if getattr(options, k) is not None] + (["--slurm-gres"] if options.gres else [])
        if given:
            raise InputError(f"{', '.join(given)} need --launcher slurm")
        return None
    options.check()
    return options


def options_from(kwargs: dict[str, Any]) -> SlurmOptions:
    """Pop the Slurm options out of a command's keyword arguments; check them."""
    options = SlurmOptions(
        drain=bool(kwargs.pop("drain", False)),
        drain_unreachable=bool(kwargs.pop("drain_unreachable", False)),
        drain_unknown=bool(kwargs.pop("drain_unknown", False)),
        drain_reboot=bool(kwargs.pop("drain_reboot", False)),
        resume=bool(kwargs.pop("resume", False)),
        resume_reason=kwargs.pop("resume_reason", None),
        service_after=int(kwargs.pop("service_after", 3)),
        dry_run=bool(kwargs.pop("dry_run", False)),
        allow_busy=bool(kwargs.pop("allow_busy", False)),
    )
    options.check()
    return options
