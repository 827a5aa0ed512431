"""`-e nodetune_hosts=GROUP` for the verbs that run no playbook (check, validate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])

extra_vars_option: Callable[[F], F] = click.option(
    "-e", "--extra-vars", "extra_vars", metavar="nodetune_hosts=GROUP", multiple=True,
    help="The group (or Ansible pattern) of GPU nodes instead of gpu_nodes, the same "
         "override as apply's; only nodetune_hosts is read. A missing or empty group is "
         "refused (exit 2).")
