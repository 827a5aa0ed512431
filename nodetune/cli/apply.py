"""`nodetune apply` and `nodetune facts`: playbooks through ansible-runner with live progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from nodetune import inventory as inventory_mod
from nodetune import report
from nodetune.cli.common import (
    err_console,
    handle_errors,
    out_console,
    parse_extra_vars,
)
from nodetune.errors import ExitCode
from nodetune.runner import (
    ApplyOptions,
    HostState,
    PlaybookResult,
    Progress,
    run_playbook,
    with_hosts_gone,
)


@click.command("apply")
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("--check", is_flag=True, help="Predict changes; change nothing on the nodes.")
@click.option("--diff", is_flag=True, help="Show what changes in files and settings.")
@click.option("-l", "--limit", metavar="PAT", help="Only hosts matching this Ansible pattern.")
@click.option("-t", "--tags", metavar="T", multiple=True,
              help="Only these roles/topics (e.g. net_sysctl,net_mtu). Repeatable.")
@click.option("--skip-tags", metavar="T", multiple=True, help="Skip these roles/topics.")
@click.option("-f", "--forks", type=click.IntRange(1, 500), default=10, show_default=True,
              help="Hosts worked on in parallel.")
@click.option("-e", "--extra-vars", "extra_vars", metavar="K=V", multiple=True,
              help="Variables as K=V, JSON/YAML, or @file.yml (repeatable; wins over inventory).")
@click.option("--playbook", default="site.yml", show_default=True,
              help="Playbook under playbooks/ (site.yml runs every role; network.yml, "
                   "drivers.yml one area), or a path to your own.")
@click.option("--timeout", type=click.IntRange(1), metavar="S",
              help="Give up after S seconds (exit 4).")
@click.option("--reboot", is_flag=True,
              help="After applying, reboot the hosts that need it, in batches, and re-check "
                   "that the driver/OFED modules load.")
@click.option("--serial", type=click.IntRange(1), default=1, show_default=True, metavar="N",
              help="With --reboot: hosts rebooted at a time.")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON on stdout.")
@handle_errors
def apply_cmd(inventory: Path, check: bool, diff: bool, limit: str | None,
              tags: tuple[str, ...], skip_tags: tuple[str, ...], forks: int,
              extra_vars: tuple[str, ...], playbook: str, timeout: int | None,
              reboot: bool, serial: int, as_json: bool) -> None:
    """Bring the inventory's nodes to the state its variables describe.

    \b
    Runs playbooks/site.yml (drivers, container toolkit, OFED, TCP stack, MTU,
    RoCE QoS, /etc/nccl.conf) through ansible-runner. Roles never reboot a node
    on their own; hosts that need one are listed at the end.

    \b
    Examples:
      nodetune apply inventory/prod --check --diff      # what would change
      nodetune apply inventory/prod --limit node-017    # one node
      nodetune apply inventory/prod -t net_sysctl -e net_sysctl_congestion_control=bbr
    """
    options = ApplyOptions(
        check=check, diff=diff, limit=limit, tags=_split(tags), skip_tags=_split(skip_tags),
        forks=forks, extra_vars=parse_extra_vars(extra_vars), timeout=timeout,
        fact_cache=report.runs_dir().parent / "fact_cache",
    )
    inv = inventory_mod.load(inventory, limit=limit)
    record = report.new_run("apply")
    if not as_json:
        mode = " (check mode: nothing will change)" if check else ""
        err_console.print(f"[bold]apply[/] {inventory} → {len(inv.hosts)} host(s){mode}")
    result = _run_with_progress(playbook, inventory, options, record.path,
                                [h.name for h in inv.hosts], quiet=as_json)
    result = with_hosts_gone(result, inventory, forks=forks)
    code = _exit_code(result)
    doc = _apply_report(inventory, options, result, code)
    if result.diffs:
        diff_file = record.path / "diff.txt"
        diff_file.write_text("".join(f"=== {t.host}: [{t.task}]\n{t.diff}" for t in result.diffs))
        doc["diff_file"] = str(diff_file)
    if reboot and doc["reboot_required"] and not check:
        doc["reboot"] = _reboot(inventory, options, sorted(doc["reboot_required"]), serial,
                                record.path, quiet=as_json)
        if doc["reboot"]["exit_code"] > code:
            code = ExitCode(doc["reboot"]["exit_code"])
            doc["exit_code"] = int(code)
    path = record.write(doc)
    if as_json:
        click.echo(path.read_text(), nl=False)
    else:
        _render_apply(result, doc)
        err_console.print(f"run record: {path.parent}")
    raise SystemExit(int(code))


@click.command("facts")
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("-l", "--limit", metavar="PAT", help="Only hosts matching this Ansible pattern.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON on stdout.")
@handle_errors
def facts_cmd(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Show each node's hardware and tuning state as nodetune sees it.

    OS and kernel, NVIDIA GPUs and driver, RDMA devices, interfaces with MTU and
    speed, and the live values of the TCP sysctls nodetune manages. Installs the
    small node_facts fact script under /etc/ansible/facts.d/ (read-only probes).
    """
    inv = inventory_mod.load(inventory, limit=limit)
    record = report.new_run("facts")
    options = ApplyOptions(limit=limit)
    result = _run_with_progress("facts.yml", inventory, options, record.path,
                                [h.name for h in inv.hosts], quiet=as_json)
    result = with_hosts_gone(result, inventory)
    facts: dict[str, Any] = dict(result.custom_stats.get("nodetune_facts") or {})
    code = _exit_code(result)
    doc = {"inventory": str(inventory), "status": result.status, "exit_code": int(code),
           "hosts": [_host_dict(h) for h in result.hosts],
           "failed_tasks": [_task_dict(t) for t in result.failed_tasks], "facts": facts}
    path = record.write(doc)
    if as_json:
        click.echo(path.read_text(), nl=False)
    else:
        from nodetune.cli.facts_view import render_facts

        out_console.print(render_facts(facts), markup=False)
        if result.failed_tasks:
            _render_failures(result)
    raise SystemExit(int(code))


def _reboot(inventory: Path, options: ApplyOptions, hosts: list[str], serial: int,
            record_dir: Path, *, quiet: bool) -> dict[str, Any]:
    """Run playbooks/reboot.yml on exactly the hosts that asked for a reboot."""
    if not quiet:
        err_console.print(f"[bold]reboot[/] {len(hosts)} host(s), {serial} at a time: "
                          + ", ".join(hosts))
    reboot_options = ApplyOptions(
        limit=",".join(hosts), forks=options.forks, timeout=options.timeout,
        extra_vars={**options.extra_vars, "nodetune_reboot_serial": serial},
        fact_cache=options.fact_cache,
    )
    result = _run_with_progress("reboot.yml", inventory, reboot_options,
                                record_dir / "reboot", hosts, quiet=quiet)
    return {"hosts": [_host_dict(h) for h in result.hosts],
            "failed_tasks": [_task_dict(t) for t in result.failed_tasks],
            "status": result.status, "exit_code": int(_exit_code(result)),
            "duration_s": round(result.duration_s, 2)}


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for raw in values for v in raw.split(",") if v.strip())


def _exit_code(result: PlaybookResult) -> ExitCode:
    if result.status == "timeout":
        return ExitCode.TIMEOUT
    if result.input_problems:  # playbooks/inputs.yml: nothing was changed anywhere
        return ExitCode.BAD_INPUT
    states = {h.state for h in result.hosts}
    if HostState.UNREACHABLE in states:
        return ExitCode.INFRASTRUCTURE
    if HostState.FAILED in states or result.status == "failed":
        return ExitCode.CHECK_FAILED
    return ExitCode.OK


class _LiveView:
    """Per-host rows (current task, counters) redrawn while the playbook runs."""

    COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped")

    def __init__(self, hosts: list[str]) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            h: {"task": "waiting", **dict.fromkeys(self.COUNTERS, 0)} for h in hosts
        }
        self.play = ""
        self.started = time.monotonic()

    def update(self, event: Progress) -> None:
        if event.kind == "play":
            self.play = event.task or ""
            return
        if not event.host:
            return
        row = self.rows.setdefault(event.host, {"task": "", **dict.fromkeys(self.COUNTERS, 0)})
        if event.kind == "task":
            row["task"] = event.task or ""
        elif event.kind == "result" and event.status in self.COUNTERS:
            row[event.status] += 1
            if event.status == "changed":
                row["ok"] += 1

    def table(self) -> Table:
        elapsed = time.monotonic() - self.started
        table = Table(title=f"{self.play}  [{elapsed:4.0f} s]", title_justify="left",
                      box=None, pad_edge=False)
        table.add_column("host")
        table.add_column("current task", overflow="ellipsis", max_width=60, no_wrap=True)
        for c in self.COUNTERS:
            table.add_column(c, justify="right")
        for host, row in self.rows.items():
            style = "red" if row["failed"] or row["unreachable"] else ""
            table.add_row(host, row["task"], *(str(row[c]) for c in self.COUNTERS), style=style)
        return table


def _run_with_progress(playbook: str, inventory: Path, options: ApplyOptions, record_dir: Path,
                       hosts: list[str], *, quiet: bool) -> PlaybookResult:
    view = _LiveView(hosts)
    cancel = threading.Event()
    with _live(view, quiet=quiet) as on_event:
        try:
            return run_playbook(playbook, inventory, options=options, artifact_dir=record_dir,
                                on_progress=on_event, cancel=cancel)
        except KeyboardInterrupt:
            cancel.set()
            raise


@contextmanager
def _live(view: _LiveView, *, quiet: bool) -> Iterator[Any]:
    if quiet:
        yield lambda _e: None
        return
    if not err_console.is_terminal:
        # Logs and CI: one line per play and per failed/unreachable result.
        def plain(event: Progress) -> None:
            view.update(event)
            if event.kind == "play":
                err_console.print(f"PLAY [{event.task}]")
            elif event.kind == "result" and event.status in ("failed", "unreachable"):
                err_console.print(f"  {event.host}: {event.status}: {event.task}")

        yield plain
        return
    with Live(view.table(), console=err_console, refresh_per_second=4, transient=True) as live:
        def on_event(event: Progress) -> None:
            view.update(event)
            live.update(view.table())

        yield on_event


def _host_dict(h: Any) -> dict[str, Any]:
    return {"host": h.host, "state": h.state.value, "ok": h.ok, "changed": h.changed,
            "failed": h.failed, "unreachable": h.unreachable, "skipped": h.skipped,
            "rescued": h.rescued, "ignored": h.ignored}


def _task_dict(t: Any) -> dict[str, Any]:
    return {"host": t.host, "task": t.task, "role": t.role, "status": t.status,
            "message": t.message}


def _apply_report(inventory: Path, options: ApplyOptions, result: PlaybookResult,
                  code: ExitCode) -> dict[str, Any]:
    reboot = dict(result.custom_stats.get("nodetune_reboot_required") or {})
    return {
        "inventory": str(inventory),
        "options": options.as_dict(),
        "status": result.status,
        "exit_code": int(code),
        "duration_s": round(result.duration_s, 2),
        "hosts": [_host_dict(h) for h in result.hosts],
        "changed_tasks": [_task_dict(t) for t in result.changed_tasks],
        "failed_tasks": [_task_dict(t) for t in result.failed_tasks],
        "reboot_required": {h: r for h, r in reboot.items() if r},
        "artifacts": str(result.artifacts),
        "input_problems": [{"host": p.host, "role": p.role, "task": p.task, "message": p.message}
                           for p in result.input_problems],
        "ansible_config": result.ansible_config,
    }


def _render_apply(result: PlaybookResult, doc: dict[str, Any]) -> None:
    rows = [[h.host, h.state.value, h.ok, h.changed, h.failed, h.unreachable, h.skipped]
            for h in result.hosts]
    out_console.print(report.format_table(
        ["host", "result", "ok", "changed", "failed", "unreachable", "skipped"], rows,
        align="llrrrrr"), markup=False)
    if result.input_problems:
        out_console.print("\nBad input (nothing was changed on any node):", markup=False)
        for p in result.input_problems:
            out_console.print(f"  {p.host}: {p.role}: {p.message}", markup=False)
    elif result.failed_tasks:
        _render_failures(result)
    if result.diffs:
        _render_diffs(result, doc)
    if doc.get("reboot"):
        rebooted = [h["host"] for h in doc["reboot"]["hosts"] if h["state"] in ("ok", "changed")]
        out_console.print(f"\nRebooted and re-checked: {', '.join(rebooted) or 'none'}",
                          markup=False)
        for t in doc["reboot"]["failed_tasks"]:
            out_console.print(f"  {t['host']}: [{t['task']}] {t['message']}", markup=False)
    elif doc["reboot_required"]:
        out_console.print("\nReboot needed (nodetune never reboots on its own; "
                          "`nodetune apply INVENTORY --reboot` does it in batches):", markup=False)
        for host, reasons in doc["reboot_required"].items():
            out_console.print(f"  {host}: {reasons}", markup=False)
    verdict = {0: "all hosts ok", 1: "some hosts failed", 2: "bad input, nothing changed",
               3: "some hosts unreachable",
               4: "timed out"}.get(doc["exit_code"], result.status)
    changed = sum(h.changed for h in result.hosts)
    out_console.print(f"\n{verdict}; {changed} change(s) in {result.duration_s:.1f} s",
                      markup=False)


DIFF_LINES = 200


def _render_diffs(result: PlaybookResult, doc: dict[str, Any]) -> None:
    """Per-host diffs (the drift report of --check --diff), the full text in the run record."""
    lines = [ln for t in result.diffs
             for ln in [f"=== {t.host}: [{t.task}]", *t.diff.rstrip("\n").splitlines()]]
    out_console.print("\nDiff:", markup=False)
    out_console.print("\n".join(lines[:DIFF_LINES]), markup=False, highlight=False)
    hosts = len({t.host for t in result.diffs})
    more = f", first {DIFF_LINES} lines shown" if len(lines) > DIFF_LINES else ""
    out_console.print(f"{len(result.diffs)} diff(s) on {hosts} host(s){more}; full diff: "
                      f"{doc.get('diff_file')}", markup=False)


def _render_failures(result: PlaybookResult) -> None:
    out_console.print("\nFailed:", markup=False)
    for t in result.failed_tasks:
        out_console.print(f"  {t.host}: [{t.task}] {t.message}", markup=False)

