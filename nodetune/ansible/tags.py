"""The tags a playbook knows (`ansible-playbook --list-tags`): an unknown --tags is bad input."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from nodetune.ansible.env import ansible_playbook, tool_path
from nodetune.errors import InputError, PlaybookError

SPECIAL_TAGS = frozenset({"all", "always", "never", "tagged", "untagged"})
_TAGS_LINE = re.compile(r"\bTAGS: \[([^\]]*)\]")


def playbook_tags(playbook: Path, inventory: Path, *, env: Mapping[str, str],
                  args: Sequence[str] = ()) -> frozenset[str]:
    """Every tag the playbook's plays, roles and tasks carry (ansible-playbook --list-tags).

    Raises:
        PlaybookError: ansible-playbook could not list them.
    """
    try:
        argv = [ansible_playbook(env.get("PATH") or tool_path()), "--list-tags",
                "-i", str(inventory.resolve()), *args, str(playbook.resolve())]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300,
                              env={**os.environ, **env}, cwd=playbook.resolve().parent)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PlaybookError(f"cannot list the tags of {playbook.name}: {exc}") from exc
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise PlaybookError(f"cannot list the tags of {playbook.name}: {tail}")
    found = {t.strip() for m in _TAGS_LINE.finditer(proc.stdout)
             for t in m.group(1).split(",") if t.strip()}
    return frozenset(found)


def check_tags(playbook: Path, inventory: Path, *, tags: tuple[str, ...],
               skip_tags: tuple[str, ...], env: Mapping[str, str],
               args: Sequence[str] = ()) -> None:
    """Refuse tags the playbook does not have, before anything runs.

    Raises:
        InputError: a --tags or --skip-tags value no play, role or task carries.
    """
    known = playbook_tags(playbook, inventory, env=env, args=args) | SPECIAL_TAGS
    for option, values in (("--tags", tags), ("--skip-tags", skip_tags)):
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(
                f"{option}: unknown tag(s) {', '.join(unknown)} in {playbook.name}; known: "
                + ", ".join(sorted(known - SPECIAL_TAGS)))
