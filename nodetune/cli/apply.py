"""`nodetune apply` and `nodetune facts`: options in, live progress and results out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from nodetune.ansible.results import PlaybookOptions
from nodetune.apply import run as apply_mod
from nodetune.cli import apply_result, apply_view, input_opts, slurm_opts
from nodetune.cli.common import RecordedVerb, global_verbosity, record
from nodetune.cli.console import err_console
from nodetune.cli.input_opts import VERBOSE_HELP


@click.command("apply", cls=RecordedVerb, epilog=input_opts.HELP)
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("--check", is_flag=True, help="Predict changes; change nothing on the nodes.")
@click.option("--diff", is_flag=True,
              help="Print the diff of every changed file and setting (without it: one line "
                   "per change and the path of the full diff).")
@click.option("--fail-on-change", is_flag=True,
              help="Exit 1 when anything changed (with --check: would change), so a "
                   "pipeline can gate on drift.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys not yet in known_hosts (changed keys still fail).")
@click.option("-l", "--limit", metavar="PAT", help="Only hosts matching this Ansible pattern.")
@click.option("-t", "--tags", metavar="T", multiple=True,
              help="Only these roles/topics (e.g. net_sysctl,net_mtu). Repeatable.")
@click.option("--skip-tags", metavar="T", multiple=True, help="Skip these roles/topics.")
@click.option("-f", "--forks", type=click.IntRange(1, 500), default=10, show_default=True,
              help="Hosts worked on in parallel.")
@click.option("-e", "--extra-vars", "extra_vars", metavar="VARS", multiple=True,
              help="Passed to ansible-playbook -e unchanged: K=V, JSON/YAML, or @file "
                   "(vaulted files too); a bare word is refused. Repeatable; wins over the "
                   "inventory. "
                   "-e nodetune_hosts=GROUP: the group (or pattern) of GPU nodes the plays "
                   "target instead of gpu_nodes.")
@click.option("--playbook", default="site.yml", show_default=True,
              help="Playbook under playbooks/ (site.yml runs every role; network.yml, "
                   "drivers.yml one area), or a path to your own.")
@click.option("--timeout", type=click.IntRange(1), metavar="S",
              help="Give up after S seconds (exit 4).")
@click.option("--reboot", is_flag=True,
              help="After applying, reboot the hosts that need it, in batches, and re-check "
                   "that the driver/OFED modules load.")
@click.option("--serial", type=click.IntRange(1), default=1, show_default=True, metavar="N",
              help="With --reboot: hosts rebooted at a time.")
@click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON on stdout.")
@slurm_opts.busy_option
@input_opts.input_options
@click.pass_context
def apply_cmd(ctx: click.Context, /, inventory: Path, check: bool, diff: bool, limit: str | None,
              fail_on_change: bool, accept_new_host_keys: bool,
              tags: tuple[str, ...], skip_tags: tuple[str, ...], forks: int,
              extra_vars: tuple[str, ...], playbook: str, timeout: int | None,
              reboot: bool, serial: int, verbose: int, as_json: bool, allow_busy: bool,
              **input_kw: Any) -> None:
    """Bring the inventory's nodes to the state its variables describe.

    \b
    Runs playbooks/site.yml (drivers, container toolkit, OFED, TCP stack, MTU,
    RoCE QoS, /etc/nccl.conf) through ansible-runner. Roles never reboot a node
    on their own; hosts that need one are listed at the end.

    \b
    Which hosts: every play targets the inventory group gpu_nodes; login and
    storage hosts in the same inventory are left alone. Another group or
    pattern: -e nodetune_hosts=GROUP. A missing or empty group is refused
    (exit 2) before anything runs.

    \b
    Host keys are always checked, whatever ansible.cfg says; a host seen for
    the first time is refused with the ssh-keyscan line to run, or its key is
    recorded with --accept-new-host-keys. Only for a throw-away lab, opt out
    explicitly in the environment:
      ANSIBLE_HOST_KEY_CHECKING=False nodetune apply inventory/lab

    \b
    Examples:
      nodetune apply inventory/prod --check --diff      # what would change
      nodetune apply inventory/prod --check --fail-on-change   # CI: exit 1 on drift
      nodetune apply inventory/prod --limit @RUN/retry.txt     # rerun the failed hosts
      nodetune apply inventory/prod --limit node-017    # one node
      nodetune apply inventory/prod -t net_sysctl -e net_sysctl_tcp_congestion_control=bbr
      nodetune apply inventory/prod -e @secrets.vault.yml --vault-id prod@prompt -vv
      nodetune apply inventory/prod -e nodetune_hosts=h100_rack_b

    \b
    Busy nodes: where Slurm is configured (nodetune_slurm_controller is set,
    or this machine has sinfo), on nodes Slurm has allocated to jobs
    (ALLOCATED or MIXED) files and settings still change, but nothing that
    would disturb the jobs runs: no container runtime restart, kernel module
    load, service start or reboot (--reboot's included). Each is listed per
    node as deferred (report.json "deferred"); the exit code is what it would
    be otherwise (0 when all else went well). The next apply on the idle node
    does it: a deferred runtime restart is remembered on the node (under
    /var/lib/nodetune/deferred), the rest is found again. --allow-busy acts
    on busy nodes as on idle ones. Slurm unreachable: exit 3, nothing runs.

    \b
    Variables: -e, group_vars and host_vars named like a role's (net_sysctl_...)
    that the role does not take are warned about with the closest name the role
    has; --strict-vars refuses them (exit 2). A key given twice in one YAML
    mapping is refused (exit 2), naming the file and line.
    """
    vault, strict_vars = input_opts.options_from(input_kw)
    options = PlaybookOptions(
        check=check, diff=diff, limit=limit, tags=_split(tags), skip_tags=_split(skip_tags),
        forks=forks, extra_vars=extra_vars, timeout=timeout,
        verbosity=verbose + global_verbosity(ctx), vault=vault,
    )
    inv = apply_mod.selection(inventory, limit=limit, extra_vars=extra_vars, playbook=playbook,
                              vault=vault)
    hosts = [h.name for h in inv.hosts]
    if not as_json:
        mode = " (check mode: nothing will change)" if check else ""
        err_console.print(f"[bold]apply[/] {escape(str(inventory))} → {len(hosts)} host(s){mode}")
    view = apply_view.LiveView(hosts)
    with apply_view.live(view, quiet=as_json, verbose=options.verbosity > 0) as (on_event, cancel):
        outcome = apply_mod.apply(inventory, playbook=playbook, options=options,
                                  record=record(ctx), reboot=reboot, serial=serial,
                                  on_event=on_event, cancel=cancel, strict_vars=strict_vars,
                                  inv=inv, fail_on_change=fail_on_change,
                                  accept_new_host_keys=accept_new_host_keys,
                                  allow_busy=allow_busy)
    if not as_json:
        apply_result.render_apply(outcome, diff=diff)
        err_console.print(f"run record: {outcome.record.parent}")
    raise SystemExit(int(outcome.exit_code))


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for raw in values for v in raw.split(",") if v.strip())
