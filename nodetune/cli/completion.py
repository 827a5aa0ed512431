"""`nodetune completion` and `nodetune --version`."""

from __future__ import annotations

from importlib import metadata

import click
from click.shell_completion import get_completion_class

from nodetune import __version__
from nodetune.ansible.collection import read_collection
from nodetune.ansible.content import content_dir
from nodetune.errors import NodetuneError

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_NODETUNE_COMPLETE"


def version_text() -> str:
    """One line: the package version and the version of the roles' collection it runs."""
    try:
        collection = read_collection(content_dir())
        roles = f"{collection.fqcn} {collection.version}"
    except NodetuneError as exc:
        roles = f"roles' collection unknown: {exc}"
    try:
        core = f"ansible-core {metadata.version('ansible-core')}"
    except metadata.PackageNotFoundError:
        core = "ansible-core not installed"
    return f"nodetune {__version__} (roles: {roles}; {core})"


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """Eager ``--version`` callback."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(version_text())
    ctx.exit(0)


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_cmd(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(nodetune completion bash)"        (in ~/.bashrc)
    zsh:   eval "$(nodetune completion zsh)"         (in ~/.zshrc)
    fish:  nodetune completion fish > ~/.config/fish/completions/nodetune.fish

    Verbs, options and their choices complete; INVENTORY completes as a path.
    """
    root = ctx.find_root().command
    cls = get_completion_class(shell)
    assert cls is not None  # SHELLS lists only shells click ships
    click.echo(cls(root, {}, "nodetune", COMPLETE_VAR).source())
