"""nodetune's command line: argument parsing, output rendering, logging set-up, exit codes."""

from __future__ import annotations

import importlib

import click

from nodetune.cli.completion import print_version
from nodetune.cli.console import setup_logging

# Each verb's module is imported when that verb runs (or --help lists it):
# `apply` need not load SSH and NCCL code, and starts faster.
COMMANDS = {
    "apply": "nodetune.cli.apply:apply_cmd",
    "check": "nodetune.cli.check:check_cmd",
    "completion": "nodetune.cli.completion:completion_cmd",
    "facts": "nodetune.cli.facts:facts_cmd",
    "lab": "nodetune.cli.lab:lab_group",
    "runs": "nodetune.cli.runs:runs_cmd",
    "tune": "nodetune.cli.tune:tune_cmd",
    "validate": "nodetune.cli.validate:validate_cmd",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, attr = COMMANDS[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

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


@click.group(cls=LazyGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
