"""ansible-runner's events, as they come: progress for the caller, and the run's results
(each host's stats, the failed and the changed tasks with their diffs, custom stats)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nodetune.ansible.results import HostResult, PlaybookEvent, TaskOutcome


class Collector:
    """Turns ansible-runner events into progress callbacks and results."""

    def __init__(self, on_progress: Callable[[PlaybookEvent], None], *,
                 verbose: bool = False) -> None:
        self._on_progress = on_progress
        self._verbose = verbose
        self.failed: list[TaskOutcome] = []
        self.changed: list[TaskOutcome] = []
        self.stats: dict[str, dict[str, int]] = {}
        self.custom_stats: dict[str, Any] = {}
        self.seen_hosts: list[str] = []

    def handle(self, event: dict[str, Any]) -> bool:
        name = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        if host and host not in self.seen_hosts:
            self.seen_hosts.append(host)
        task = str(data.get("task") or "")
        role = str(data.get("role") or "")
        if self._verbose and event.get("stdout"):
            self._on_progress(PlaybookEvent(kind="output", text=str(event["stdout"])))
        if name == "playbook_on_play_start":
            self._on_progress(PlaybookEvent(kind="play", task=str(data.get("play") or "")))
        elif name == "runner_on_start":
            self._on_progress(PlaybookEvent(kind="task", host=host, task=task))
        elif name in ("runner_on_ok", "runner_on_failed", "runner_on_skipped",
                      "runner_on_unreachable"):
            self._result(name, host, task, role, data)
        elif name == "playbook_on_stats":
            for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
                for h, count in (data.get(key) or {}).items():
                    self.stats.setdefault(h, {})[key] = int(count)
            self.custom_stats = dict(data.get("artifact_data") or {})
        return True  # keep every event in the artifacts

    def _result(self, name: str, host: str | None, task: str, role: str,
                data: dict[str, Any]) -> None:
        res = data.get("res") or {}
        status = {"runner_on_ok": "ok", "runner_on_failed": "failed",
                  "runner_on_skipped": "skipped", "runner_on_unreachable": "unreachable"}[name]
        if status == "ok" and res.get("changed"):
            status = "changed"
        if status == "failed" and data.get("ignore_errors"):
            status = "ignored"
        self._on_progress(PlaybookEvent(kind="result", host=host, task=task, status=status))
        if host is None:
            return
        if status in ("failed", "unreachable"):
            self.failed.append(TaskOutcome(host=host, task=task, status=status,
                                           message=_message(res), role=role))
        elif status == "changed":
            self.changed.append(TaskOutcome(host=host, task=task, status=status, role=role,
                                            diff=render_diff(res.get("diff")),
                                            target=str(res.get("dest") or res.get("path") or "")))

    def host_results(self) -> tuple[HostResult, ...]:
        hosts = list(self.seen_hosts) + [h for h in self.stats if h not in self.seen_hosts]
        out = []
        for h in hosts:
            s = self.stats.get(h, {})
            out.append(HostResult(
                host=h, ok=s.get("ok", 0), changed=s.get("changed", 0),
                failed=s.get("failures", 0), unreachable=s.get("dark", 0),
                skipped=s.get("skipped", 0), rescued=s.get("rescued", 0),
                ignored=s.get("ignored", 0),
            ))
        return tuple(out)


def render_diff(diff: Any) -> str:
    """A task result's ``diff`` (one mapping or a list of them) as unified diff text."""
    import difflib
    import json

    parts: list[str] = []
    for item in diff if isinstance(diff, list) else [diff] if diff else []:
        if not isinstance(item, Mapping):
            continue
        if item.get("prepared"):
            parts.append(str(item["prepared"]).rstrip("\n") + "\n")
            continue
        if "before" not in item and "after" not in item:
            continue

        def text(value: Any) -> str:
            if isinstance(value, str):
                return value
            return json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"

        before, after = text(item.get("before", "")), text(item.get("after", ""))
        if before == after:
            continue
        parts.append("".join(difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            fromfile=str(item.get("before_header") or "before"),
            tofile=str(item.get("after_header") or "after"))))
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _message(res: Mapping[str, Any]) -> str:
    """The most useful one-line reason out of a failed task's result."""
    parts = []
    msg = res.get("msg")
    if msg:
        parts.append(str(msg))
    if res.get("results") and isinstance(res["results"], list):
        for item in res["results"]:
            if isinstance(item, Mapping) and item.get("failed"):
                parts.append(f"item {item.get('item')!r}: {_message(item)}")
                break
    for key in ("stderr", "module_stderr"):
        if res.get(key):
            parts.append(str(res[key]).strip().splitlines()[-1])
            break
    return " | ".join(parts)[:1000] or "failed (no message)"
