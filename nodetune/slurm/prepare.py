"""Before a run: where scontrol runs, each node's Slurm name, and the busy-node refusal.

Nodes Slurm has allocated to jobs are refused (exit 2, naming their jobs) before
anything runs on a node, so that a test never competes with production work unnoticed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodetune.ansible.inventory import Host, Inventory
from nodetune.errors import InputError
from nodetune.slurm.model import (
    CONTROLLER_VAR,
    NODENAME_VAR,
    SLURM_NAME,
    SlurmOptions,
    SlurmPlan,
    controllers_named,
)
from nodetune.slurm.scontrol import Scontrol, configured, connect, preflight
from nodetune.slurm.state import SlurmNode

# --- resolving the plan -------------------------------------------------------------


def slurm_name(host: Host) -> str:
    """``host``'s Slurm node name: ``nodetune_slurm_nodename``, else the inventory name.

    Raises:
        InputError: a name scontrol would read as a host list or as more words.
    """
    raw = host.vars.get(NODENAME_VAR, host.name)
    name = str(raw) if raw is not None else host.name
    if not SLURM_NAME.match(name):
        where = NODENAME_VAR if NODENAME_VAR in host.vars else "its inventory name"
        raise InputError(f"{where} {name!r} is not one Slurm node name (letters, digits, "
                         "'.', '_', '-'; no host lists); set nodetune_slurm_nodename",
                         host=host.name)
    return name


def plan(inv: Inventory, hosts: Sequence[Host], options: SlurmOptions) -> SlurmPlan:
    """Resolve the controller and every node's Slurm name; nothing is contacted.

    Raises:
        InputError: hosts disagree on the controller, the controller is not an
            inventory host, or a Slurm node name is not valid.
    """
    options.check()
    names = {h.name: slurm_name(h) for h in hosts}
    dupes = sorted({n for n in names.values() if list(names.values()).count(n) > 1})
    if dupes:
        raise InputError(f"{NODENAME_VAR}: several hosts map to Slurm node {dupes[0]!r}")
    wanted = controllers_named(hosts)
    if len(wanted) > 1:
        raise InputError(f"{CONTROLLER_VAR} differs between hosts ({', '.join(sorted(wanted))});"
                         " set it once, for example in group_vars/all")
    controller = None
    if wanted:
        name = wanted.pop()
        # The controller may be outside the hosts the verb acts on (--limit, the GPU group).
        try:
            controller = next((h for h in inv.hosts if h.name == name), None) or \
                inv.anywhere(name)
        except InputError:
            raise InputError(f"{CONTROLLER_VAR} {name!r} is not a host in {inv.source}; add it "
                             "(for example in a slurm_controller group) with its connection "
                             "variables") from None
    return SlurmPlan(options=options, controller=controller, names=names)


@dataclass(frozen=True, slots=True)
class Busy:
    """A node that Slurm has allocated to jobs."""

    node: str
    slurm_node: str
    state: str
    jobs: tuple[str, ...]

    def __str__(self) -> str:
        held = (f"job{'s' if len(self.jobs) > 1 else ''} {', '.join(self.jobs)}"
                if self.jobs else "no job listed by squeue")
        return f"{self.node} ({self.state}: {held})"


def busy_nodes(names: Mapping[str, str], found: Mapping[str, SlurmNode],
               scontrol: Scontrol) -> tuple[Busy, ...]:
    """The nodes (inventory name: Slurm name) that Slurm has allocated (ALLOCATED or MIXED),
    with the ids of the jobs holding them.

    Raises:
        SlurmError: squeue cannot be read.
    """
    busy = {node: found[name] for node, name in names.items()
            if name in found and found[name].busy}
    if not busy:
        return ()
    jobs = scontrol.jobs()
    return tuple(Busy(node=node, slurm_node=sn.name, state=sn.display_state,
                      jobs=jobs.get(sn.name, ())) for node, sn in sorted(busy.items()))


def refuse_busy(busy: Sequence[Busy], where: str) -> None:
    """Refuse to test nodes that run jobs.

    Raises:
        InputError: naming every busy node and its jobs.
    """
    if busy:
        raise InputError(
            f"Slurm (asked on {where}) has allocated {len(busy)} selected node(s) to running "
            f"jobs: {'; '.join(str(b) for b in busy)}; a test there would compete with them "
            "and measure them as well. Choose idle nodes (--limit, --partners), or pass "
            "--allow-busy", host=busy[0].node)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What :func:`prepare` decided and found, once for the run, from one plan resolved
    for every node it touches:

    - ``plan``: what to drain/resume after the run (None: nothing);
    - ``seen``: what Slurm said of each node it was asked about (by Slurm name);
    - ``recheck``: the nodes of a run over SSH that the busy refusal found idle, to ask
      about again after it (:func:`nodetune.slurm.recheck.watch`; None: nothing, as Slurm
      is not configured for them, or ``--allow-busy``, or the run holds its nodes);
    - ``launcher``: where salloc/srun run and the nodes' Slurm names, for
      ``--launcher slurm`` (None: the run is over SSH)."""

    plan: SlurmPlan | None = None
    seen: Mapping[str, SlurmNode] = field(default_factory=dict)
    recheck: SlurmPlan | None = None
    launcher: SlurmPlan | None = None


def _for_launcher(planned: SlurmPlan, hosts: Sequence[Host]) -> SlurmPlan:
    """``planned`` as ``--launcher slurm`` needs it: with a controller.

    Raises:
        InputError: no host names a Slurm controller (the variable is named).
    """
    if planned.controller is None:
        raise InputError(f"--launcher slurm needs {CONTROLLER_VAR}: set it (for example in "
                         "group_vars/all) to the inventory host that runs salloc and srun",
                         host=hosts[0].name if hosts else None)
    return planned


def prepare(inv: Inventory, hosts: Sequence[Host], options: SlurmOptions, *,
            busy: Sequence[Host] | None = None,
            launcher: Sequence[Host] | None = None) -> Prepared:
    """Before the run: resolve the plan, once, for ``hosts``, the ``busy`` ones and the
    ``launcher``'s, and ask Slurm for every node; where Slurm is configured, refuse the
    ``busy`` hosts (the test's nodes and partners) that Slurm has allocated to jobs, unless
    ``options.allow_busy``. ``launcher``: the hosts ``--launcher slurm`` runs the test on
    (None: the run is over SSH); their plan is checked before Slurm is contacted. Nothing
    is resolved or contacted where Slurm is neither to be touched (``options.enabled``),
    nor asked about busy nodes, nor the launcher.

    Raises:
        InputError: a bad name or option, no controller for ``--launcher slurm``, a node
            Slurm does not know, or a busy node.
        SlurmError: Slurm cannot be asked.
    """
    check_busy = busy is not None and not options.allow_busy and configured(busy)
    if not options.enabled and not check_busy and launcher is None:
        return Prepared()
    everyone = list({h.name: h for h in (*hosts, *(busy or ()), *(launcher or ()))}.values())
    asked = plan(inv, everyone, options)
    launcher_plan = (None if launcher is None
                     else _for_launcher(asked.only(launcher, SlurmOptions()), launcher))
    found: dict[str, SlurmNode] = {}
    if options.enabled or check_busy:
        with connect(asked) as scontrol:
            found = preflight(asked, scontrol)
            if check_busy:
                names = {h.name: asked.names[h.name] for h in busy or ()}
                refuse_busy(busy_nodes(names, found, scontrol), asked.where)
    # Over SSH nothing holds the nodes: those found idle are asked about again after the
    # run. --launcher slurm's steps run inside its own exclusive allocation.
    again = (asked.only(busy or (), SlurmOptions())
             if check_busy and launcher is None else None)
    return Prepared(plan=asked.only(hosts) if options.enabled else None, seen=found,
                    recheck=again, launcher=launcher_plan)
