"""nodetune's command line: argument parsing, output rendering, logging set-up, exit codes."""

from __future__ import annotations

import click

from nodetune.cli.apply import apply_cmd, facts_cmd
from nodetune.cli.check import check_cmd
from nodetune.cli.common import setup_logging
from nodetune.cli.completion import completion_cmd, print_version
from nodetune.cli.lab import lab_group
from nodetune.cli.runs import runs_cmd
from nodetune.cli.validate import validate_cmd

EPILOG = """\b
Exit codes (every verb):
  0 ok    1 a check failed (host failed, busbw under threshold)
  2 bad input (usage, inventory, variables)
  3 infrastructure (unreachable host, SSH, launch)    4 timeout
  130/143 interrupted (Ctrl-C / SIGTERM)
Whatever ends apply, facts, check or validate, it leaves .nodetune/runs/<id>/
report.json and report.html, and --json prints that document on stdout.

\b
First steps on a laptop, no cluster needed:
  nodetune lab up && nodetune apply inventory/lab && nodetune facts inventory/lab
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=print_version,
              help="Show nodetune's version and the version of the roles' collection it runs.")
@click.option("-v", "--verbose", count=True,
              help="More log output (-vv for debug); apply and facts pass it on to "
                   "ansible-playbook.")
def main(verbose: int) -> None:
    """Tune GPU cluster nodes with Ansible, then prove the fabric with NCCL all_reduce.

    Every run is recorded under .nodetune/runs/ (see `nodetune runs`).
    """
    setup_logging(verbose)


main.add_command(apply_cmd)
main.add_command(check_cmd)
main.add_command(completion_cmd)
main.add_command(facts_cmd)
main.add_command(lab_group)
main.add_command(runs_cmd)
main.add_command(validate_cmd)
