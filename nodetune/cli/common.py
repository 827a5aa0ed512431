"""What every verb shares: error → exit code mapping, output streams, logging, -e parsing."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
import yaml
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from nodetune.errors import InputError, NodetuneError

P = ParamSpec("P")
R = TypeVar("R")

# Progress and diagnostics go to stderr so that stdout stays clean for --json.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)


def setup_logging(verbose: int) -> None:
    """Send the library's log records to stderr; -v shows INFO, -vv DEBUG."""
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = RichHandler(console=err_console, show_time=False, show_path=False)
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn nodetune errors into one clear line on stderr and the verb's exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except NodetuneError as exc:
            err_console.print("[bold red]error:[/] " + escape(str(exc)))
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            sys.exit(130)

    return wrapper


def parse_extra_vars(values: Iterable[str]) -> dict[str, Any]:
    """Parse ``-e`` values the way ansible-playbook does: K=V pairs, JSON/YAML, or @file.

    Raises:
        InputError: a value that is none of those.
    """
    merged: dict[str, Any] = {}
    for raw in values:
        text = raw.strip()
        if text.startswith("@"):
            path = Path(text[1:]).expanduser()
            try:
                data = yaml.safe_load(path.read_text())
            except OSError as exc:
                raise InputError(f"-e {raw}: cannot read {path}: {exc.strerror}") from None
            except yaml.YAMLError as exc:
                raise InputError(f"-e {raw}: {path} is not valid YAML: {exc}") from None
            if not isinstance(data, dict):
                raise InputError(f"-e {raw}: {path} must hold a mapping of variables")
            merged.update(data)
        elif text.startswith("{"):
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                data = None
            if not isinstance(data, dict):
                raise InputError(f"-e {raw!r}: not a valid JSON/YAML mapping")
            merged.update(data)
        elif "=" in text:
            # As with ansible-playbook, KEY=VALUE values are strings; use JSON/YAML
            # (-e '{"k": 9000}') for other types.
            for pair in _split_pairs(text, raw):
                key, _, value = pair.partition("=")
                if not key.isidentifier():
                    raise InputError(f"-e {raw!r}: {key!r} is not a valid variable name")
                merged[key] = value
        else:
            raise InputError(
                f"-e {raw!r}: expected KEY=VALUE, a JSON/YAML mapping, or @file.yml "
                "(for example -e net_mtu_default=9000)"
            )
    return merged


def _split_pairs(text: str, raw: str) -> list[str]:
    import shlex

    try:
        pairs = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"-e {raw!r}: {exc}") from None
    for pair in pairs:
        if "=" not in pair or pair.startswith("="):
            raise InputError(f"-e {raw!r}: {pair!r} is not KEY=VALUE")
    return pairs


def print_json(doc: Any) -> None:
    """Write a document to stdout as JSON."""
    click.echo(json.dumps(doc, indent=2, default=str))

