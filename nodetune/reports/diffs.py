"""The drift an ``apply --check --diff`` found, read back from ansible-runner's job events.

ansible-runner keeps one JSON file per event under
``<artifacts>/job_events/``; a changed task's result carries ``diff`` as
Ansible's callback receives it: a mapping (or a list of them) with
``before``/``after`` and their headers, or a ready ``prepared`` text.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_EVENTS = 20000        # a site.yml run over a large fleet stays far below this
MAX_DIFF_CHARS = 20000    # per task and host: a page, not a copy of a large file


@dataclass(frozen=True, slots=True)
class TaskDiff:
    """One changed (or would-change) task on one host, with its diff text."""

    host: str
    task: str
    role: str
    text: str


def read_diffs(artifacts: Path) -> list[TaskDiff]:
    """Every diff in the job events under ``artifacts`` (``<run>/ansible``), in event order."""
    events_dir = artifacts / "job_events"
    if not events_dir.is_dir():
        return []
    out: list[TaskDiff] = []
    for event in _events(events_dir):
        if event.get("event") != "runner_on_ok":
            continue
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        if not isinstance(res, Mapping) or not res.get("changed") or not res.get("diff"):
            continue
        text = format_diff(res["diff"])
        if text:
            out.append(TaskDiff(host=str(data.get("host") or "?"),
                                task=str(data.get("task") or "?"),
                                role=str(data.get("role") or ""), text=text))
    return out


def _events(events_dir: Path) -> Iterator[Mapping[str, Any]]:
    files = sorted(events_dir.glob("*.json"), key=_counter)[:MAX_EVENTS]
    for path in files:
        try:
            event = json.loads(path.read_text(errors="replace"))
        except (OSError, ValueError) as exc:
            log.debug("skipping unreadable event %s: %s", path, exc)
            continue
        if isinstance(event, Mapping):
            yield event


def _counter(path: Path) -> tuple[int, str]:
    head = path.name.split("-", 1)[0]
    return (int(head), path.name) if head.isdigit() else (1 << 62, path.name)


def format_diff(diff: object) -> str:
    """Ansible's ``diff`` result as unified-diff text (what ``--diff`` prints)."""
    items = diff if isinstance(diff, list) else [diff]
    chunks: list[str] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("prepared"):
            chunks.append(str(item["prepared"]).rstrip("\n"))
            continue
        if "before" not in item and "after" not in item:
            continue
        before, after = _text(item.get("before")), _text(item.get("after"))
        if before == after:
            continue
        lines = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            fromfile=str(item.get("before_header") or "before"),
            tofile=str(item.get("after_header") or "after"))
        chunks.append("".join(line if line.endswith("\n") else line + "\n"
                              for line in lines).rstrip("\n"))
    text = "\n".join(c for c in chunks if c)
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + f"\n... ({len(text) - MAX_DIFF_CHARS} more characters)"
    return text


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"
