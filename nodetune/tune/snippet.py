"""The recommended setting as the nccl_config role's variables: a group_vars snippet that
``apply`` turns into ``/etc/nccl.conf`` lines.

The role writes NCCL_ALGO, NCCL_PROTO, the channel counts, NCCL_BUFFSIZE and
NCCL_TOPO_FILE from ``nccl_config_extra`` (roles/nccl_config/vars/main.yml types them).
A group_vars file sets the whole mapping, so the snippet carries the inventory's own
``nccl_config_extra`` too, the recommendation on top. The text is YAML dumped by the YAML
library (every value quoted as it needs), never pasted together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from nodetune.errors import InputError
from nodetune.files import write_atomic

VAR_EXTRA = "nccl_config_extra"


def existing_extra(host_vars: Mapping[str, Any], host: str) -> dict[str, Any]:
    """The inventory's ``nccl_config_extra`` for ``host`` (empty when unset).

    Raises:
        InputError: it is not a mapping, naming the host and the variable.
    """
    raw = host_vars.get(VAR_EXTRA) or {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{VAR_EXTRA} must be a mapping of NCCL_*: value, got "
                         f"{type(raw).__name__}", host=host)
    return {str(k): v for k, v in raw.items()}


def pair_extra(hosts: Sequence[tuple[str, Mapping[str, Any]]], *,
               writing: bool) -> tuple[dict[str, Any] | None, str]:
    """The ``nccl_config_extra`` one snippet can carry for every host of the pair: each
    host's own, when they are the same. One group_vars mapping replaces the variable on
    both nodes, so where the hosts differ (a key only one has, or another value) the
    snippet would change one node's setting that tune never measured: with ``writing``
    (``--write``) that is refused, else the snippet is withheld, with the reason.

    Raises:
        InputError: a host's variable is not a mapping; or, with ``writing``, the hosts'
            mappings differ (names the key, both hosts and both values).
    """
    extras = [(host, existing_extra(host_vars, host)) for host, host_vars in hosts]
    (first, mine), *others = extras
    for other, theirs in others:
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                why = (f"{VAR_EXTRA}[{key}] differs: {mine.get(key, '(unset)')!r} on {first}, "
                       f"{theirs.get(key, '(unset)')!r} on {other}; one group_vars snippet "
                       "would set both nodes alike (make the two the same, or write the "
                       "snippet per host)")
                if writing:
                    raise InputError(f"--write: {why}", host=other)
                return None, why
    return mine, ""


def _typed(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def group_vars(settings: Mapping[str, str], extra: Mapping[str, Any], *, run_id: str) -> str:
    """A group_vars document: ``nccl_config_extra`` = the inventory's, then ``settings``."""
    merged = {**extra, **{k: _typed(v) for k, v in settings.items()}}
    head = (f"# NCCL settings measured by nodetune tune (run {run_id}); apply writes them\n"
            "# into /etc/nccl.conf (role nccl_config). Merged with this group's own\n"
            f"# {VAR_EXTRA}, which this mapping replaces.\n")
    body = yaml.safe_dump({VAR_EXTRA: merged}, default_flow_style=False, sort_keys=False,
                          allow_unicode=False)
    return head + body


def check_target(path: Path, *, force: bool) -> None:
    """``--write PATH`` before anything runs: not an existing file unless ``force``, and
    in a directory that exists.

    Raises:
        InputError: naming the file.
    """
    if path.is_dir():
        raise InputError(f"--write {path}: is a directory")
    if path.exists() and not force:
        raise InputError(f"--write {path}: the file exists; pass --force to replace it")
    if not path.parent.is_dir():
        raise InputError(f"--write {path}: directory {path.parent} does not exist")


def write(path: Path, text: str, *, force: bool) -> None:
    """Write the snippet; a file that appeared meanwhile is kept unless ``force``.

    Raises:
        InputError: the file exists (without ``force``) or cannot be written.
    """
    try:
        if force:
            write_atomic(path, text)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        raise InputError(f"--write {path}: the file exists; pass --force to replace it") \
            from None
    except OSError as exc:
        raise InputError(f"--write {path}: {exc.strerror or exc}") from None
