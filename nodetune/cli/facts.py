"""`nodetune facts`: each node's hardware and tuning state, as node_facts reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nodetune.ansible.results import PlaybookOptions
from nodetune.apply import run as apply_mod
from nodetune.cli import apply_result, apply_view, input_opts
from nodetune.cli.common import RecordedVerb, global_verbosity, record
from nodetune.cli.console import out_console
from nodetune.cli.input_opts import VERBOSE_HELP


@click.command("facts", cls=RecordedVerb, epilog=input_opts.HELP)
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("-l", "--limit", metavar="PAT", help="Only hosts matching this Ansible pattern.")
@click.option("-e", "--extra-vars", "extra_vars", metavar="VARS", multiple=True,
              help="Passed to ansible-playbook -e, as for apply; -e nodetune_hosts=GROUP: the "
                   "group (or pattern) of GPU nodes instead of gpu_nodes.")
@click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON on stdout.")
@input_opts.input_options
@click.pass_context
def facts_cmd(ctx: click.Context, /, inventory: Path, limit: str | None,
              extra_vars: tuple[str, ...], verbose: int, as_json: bool, **input_kw: Any) -> None:
    """Show each node's hardware and tuning state as nodetune sees it.

    OS and kernel, NVIDIA GPUs and driver, RDMA devices, interfaces with MTU and
    speed, and the live values of the TCP sysctls nodetune manages. Installs the
    small node_facts fact script under /etc/ansible/facts.d/ (read-only probes).
    Targets the group gpu_nodes (or -e nodetune_hosts=GROUP), like every verb;
    a missing or empty group is refused (exit 2).
    """
    vault, strict_vars = input_opts.options_from(input_kw)
    inv = apply_mod.selection(inventory, limit=limit, extra_vars=extra_vars,
                              playbook="facts.yml", vault=vault)
    hosts = [h.name for h in inv.hosts]
    options = PlaybookOptions(limit=limit, extra_vars=extra_vars,
                              verbosity=verbose + global_verbosity(ctx), vault=vault)
    view = apply_view.LiveView(hosts)
    with apply_view.live(view, quiet=as_json, verbose=options.verbosity > 0) as (on_event, cancel):
        outcome = apply_mod.facts(inventory, options=options, record=record(ctx),
                                  on_event=on_event, cancel=cancel, strict_vars=strict_vars,
                                  inv=inv)
    if not as_json:
        from nodetune.cli.facts_view import render_facts

        render_facts(out_console, outcome.facts)
        if outcome.result.failed_tasks:
            apply_result.print_failures(out_console, outcome.result.failed_tasks)
    raise SystemExit(int(outcome.exit_code))
