"""Run a playbook through ansible-runner (its events read by :mod:`~nodetune.ansible.events`),
and ask the hosts that failed whether they still answer."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible.content import content_dir
from nodetune.ansible.env import local_tmp, playbook_env, ssh_masters, tool_path
from nodetune.ansible.events import Collector
from nodetune.ansible.results import HostState, PlaybookEvent, PlaybookOptions, PlaybookResult
from nodetune.ansible.tags import check_tags
from nodetune.ansible.vault import NO_VAULT, Vault
from nodetune.ansible.vault import playbook_args as vault_args
from nodetune.errors import InputError, PlaybookError, RecordError
from nodetune.procs import RunMark

log = logging.getLogger(__name__)

# ansible-playbook's exit statuses for a playbook it could not parse (4) and for bad or
# incomplete options (5), such as an -e value that is not K=V, JSON/YAML or a readable @file.
ANSIBLE_BAD_INPUT_RC = (4, 5)
# How ansible-playbook names an -e value it could not parse (it may exit 1 for those).
_EXTRA_VARS_ERRORS = ("<CLI option '-e'>", "Invalid extra vars data")


def _collections_path(content: Path, private: Path) -> str:
    """ANSIBLE_COLLECTIONS_PATH that resolves ``nodetune.cluster.*`` to this content.

    The roles call the collection's shared modules by FQCN; a link named
    ``ansible_collections/nodetune/cluster`` makes the running nodetune's own
    content that collection, ahead of any other installed version of it.
    """
    root = private / "collections"
    link = root / "ansible_collections" / "nodetune" / "cluster"
    link.parent.mkdir(parents=True)
    link.symlink_to(content, target_is_directory=True)
    rest = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    return os.pathsep.join([str(root), *([rest] if rest else [])])


def extra_vars_arg(value: str) -> str:
    """``value`` as ansible-playbook must get it: ``@file`` made absolute.

    ansible-playbook runs in ansible-runner's project directory, so a relative
    ``@file`` would be looked up there rather than where the operator typed it.
    """
    if not value.startswith("@"):
        return value
    return "@" + str(Path(value[1:]).expanduser().absolute())


def run_playbook(
    playbook: str,
    inventory: Path,
    *,
    options: PlaybookOptions,
    artifact_dir: Path,
    on_progress: Callable[[PlaybookEvent], None] = lambda _p: None,
    cancel: threading.Event | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` (or a playbook file path) and collect the results.

    Raises:
        InputError: the playbook does not exist.
        PlaybookError: ansible-runner could not start ansible-playbook.
        RecordError: the disk under ``artifact_dir`` is full.
    """
    import ansible_runner

    content = content_dir()
    playbook_path = Path(playbook) if "/" in playbook else content / "playbooks" / playbook
    if not playbook_path.is_file():
        raise InputError(f"playbook {playbook_path} does not exist")
    extra_args: list[str] = []
    for value in options.extra_vars:
        arg = extra_vars_arg(value)
        if arg.startswith("@") and not os.access(arg[1:], os.R_OK):
            raise InputError(f"-e {value}: cannot read {value[1:]}")
        extra_args += ["-e", arg]
    collector = Collector(on_progress, verbose=options.verbosity > 0)
    cmdline: list[str] = []
    if options.check:
        cmdline.append("--check")
    if options.diff:
        cmdline.append("--diff")
    ansible_vars, config = playbook_env(content=content)
    log.info("ansible config in force: %s", config.describe())
    cmdline += extra_args
    env = {
        **ansible_vars,
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner starts ansible-playbook from this PATH, and the tag check
        # below looks it up on the same one (ansible_playbook).
        "PATH": tool_path(),
    }
    started = time.monotonic()
    stop = cancel or threading.Event()
    with tempfile.TemporaryDirectory(prefix="nodetune-runner-") as private, \
            ssh_masters(config) as masters, \
            vault_args(options.vault, Path(private)) as secrets:
        cmdline += secrets
        env.update(masters)
        env.update(local_tmp(config, Path(private)))
        mark = RunMark()
        env.update(mark.env)
        env["ANSIBLE_COLLECTIONS_PATH"] = _collections_path(content, Path(private))
        if options.tags or options.skip_tags:
            check_tags(playbook_path, inventory, tags=options.tags,
                       skip_tags=options.skip_tags, env=env, args=secrets)
        artifact_dir.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {
            "private_data_dir": private,
            "artifact_dir": str(artifact_dir),
            "ident": "ansible",
            "project_dir": str(playbook_path.resolve().parent),
            "playbook": str(playbook_path.resolve()),
            "inventory": str(inventory.resolve()),
            "limit": options.limit,
            "forks": options.forks,
            "tags": ",".join(options.tags) or None,
            "skip_tags": ",".join(options.skip_tags) or None,
            "cmdline": " ".join(shlex.quote(arg) for arg in cmdline) or None,
            "envvars": env,
            "verbosity": options.verbosity or None,
            "timeout": options.timeout,
            "quiet": True,
            "event_handler": collector.handle,
            "cancel_callback": stop.is_set,
            "suppress_env_files": True,
        }
        if options.fact_cache is not None:
            # ansible-runner sets ANSIBLE_CACHE_PLUGIN_CONNECTION itself, over any
            # envvars: an absolute fact_cache is the way to choose the directory.
            kwargs.update(fact_cache_type="jsonfile", fact_cache=str(options.fact_cache.resolve()))
        runner = _run_cancellable(ansible_runner.run, kwargs, stop, playbook, mark)
    duration = time.monotonic() - started
    hosts = collector.host_results()
    if runner.status not in ("timeout", "canceled") and not hosts and runner.rc not in (0, None):
        tail = _tail(artifact_dir / "ansible" / "stdout")
        if runner.rc in ANSIBLE_BAD_INPUT_RC or any(m in tail for m in _EXTRA_VARS_ERRORS):
            raise InputError(f"ansible-playbook refused the input (exit {runner.rc}): {tail}")
        raise PlaybookError(f"ansible-playbook exited {runner.rc} before running any task: {tail}")
    return PlaybookResult(
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        hosts=hosts,
        failed_tasks=tuple(collector.failed),
        changed_tasks=tuple(collector.changed),
        custom_stats=collector.custom_stats,
        artifacts=artifact_dir / "ansible",
        duration_s=duration,
        ansible_config=config.describe(),
    )


def unreachable_now(inventory: Path, hosts: list[str], *, forks: int = 10,
                    vault: Vault = NO_VAULT) -> frozenset[str]:
    """Which of ``hosts`` cannot be reached at all now (one ad-hoc ping over the same config).

    Used after a run in which hosts failed: a host whose tasks failed because
    it went away mid-run (powered off, crashed, network gone) is unreachable,
    not a host that failed a check.
    """
    if not hosts:
        return frozenset()
    import ansible_runner

    ansible_vars, config = playbook_env(content=content_dir())
    collector = Collector(lambda _p: None)
    # Masters of its own: "does it answer now" must not ride the run's old connection.
    with tempfile.TemporaryDirectory(prefix="nodetune-ping-") as private, \
            ssh_masters(config) as masters, vault_args(vault, Path(private)) as secrets:
        try:
            ansible_runner.run(
                private_data_dir=private, host_pattern=",".join(hosts),
                cmdline=" ".join(shlex.quote(a) for a in secrets) or None,
                module="ansible.builtin.ping", inventory=str(inventory.resolve()),
                forks=forks, quiet=True, event_handler=collector.handle,
                envvars={**ansible_vars, **masters, **local_tmp(config, Path(private)),
                         "ANSIBLE_NOCOLOR": "1", "PATH": tool_path()},
                suppress_env_files=True, timeout=120,
            )
        except Exception as exc:  # same set-up errors as run_playbook; the run's verdict stands
            log.warning("could not re-check reachability of %s: %s", ", ".join(hosts), exc)
            return frozenset()
    gone = {t.host for t in collector.failed if t.status == "unreachable"}
    return frozenset(h for h in hosts if h in gone)


def with_hosts_gone(result: PlaybookResult, inventory: Path, *,
                    forks: int = 10, vault: Vault = NO_VAULT) -> PlaybookResult:
    """``result`` with failed hosts that no longer answer marked unreachable ("went away").

    A node that dies mid-run often fails a task ("MODULE FAILURE", "modules failed
    to execute") before Ansible would call it unreachable; asking the failed hosts
    again, after the run, tells a dead node (exit 3) from a failed check (exit 1)
    without reading Ansible's messages. Input problems and timeouts are left as they are.
    """
    if result.input_problems or result.status in ("timeout", "canceled"):
        return result
    result = _lost_mid_run(result)
    failed = [h.host for h in result.hosts if h.state is HostState.FAILED]
    if not failed:
        return result
    gone = unreachable_now(inventory, failed, forks=forks, vault=vault)
    if not gone:
        return result
    hosts = tuple(dataclasses.replace(h, unreachable=max(h.unreachable, 1)) if h.host in gone
                  else h for h in result.hosts)
    tasks = tuple(
        dataclasses.replace(t, status="unreachable", message=(
            f"host went away during the run: it failed [{t.task}] and does not answer now "
            f"(was: {t.message})"))
        if t.host in gone and t.status == "failed" else t
        for t in result.failed_tasks)
    for host in sorted(gone):
        log.warning("%s: went away during the run (does not answer now)", host)
    return dataclasses.replace(result, hosts=hosts, failed_tasks=tasks)


def _lost_mid_run(result: PlaybookResult) -> PlaybookResult:
    """``result`` with the unreachable tasks of hosts that had answered earlier said to be
    "went away": Ansible itself lost them mid-run, after tasks had run on them."""
    lost = {h.host for h in result.hosts
            if h.state is HostState.UNREACHABLE and (h.ok or h.changed or h.failed)}
    if not lost:
        return result
    tasks = tuple(
        dataclasses.replace(t, message=(
            f"host went away during the run: Ansible lost it at [{t.task}] "
            f"after it had answered (was: {t.message})"))
        if t.host in lost and t.status == "unreachable" and "went away" not in t.message else t
        for t in result.failed_tasks)
    for host in sorted(lost):
        log.warning("%s: went away during the run (Ansible lost it)", host)
    return dataclasses.replace(result, failed_tasks=tasks)


def _run_cancellable(run: Callable[..., Any], kwargs: dict[str, Any], stop: threading.Event,
                     playbook: str, mark: RunMark) -> Any:
    """ansible-runner in a thread, so that Ctrl-C or SIGTERM in the main thread sets ``stop``:
    ansible-runner then kills ansible-playbook's process group before the interrupt goes on,
    and every other process carrying the run's ``mark`` (its workers run in sessions of
    their own) is ended after it, as on a timeout."""
    box: dict[str, Any] = {}
    # Waited on instead of Thread.join: a join interrupted by a signal can hang for good
    # on Python < 3.13 (its lock is left held), and Ctrl-C would then never end the run.
    done = threading.Event()

    def work() -> None:
        try:
            box["runner"] = run(**kwargs)
        except Exception as exc:  # ansible_runner raises bare exceptions for set-up errors
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="ansible-runner", daemon=True).start()
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        stop.set()
        done.wait(30)
        mark.end()
        raise
    if getattr(box.get("runner"), "status", None) in ("timeout", "canceled"):
        mark.end()  # ansible-runner ended ansible-playbook's group, not its workers' sessions
    error = box.get("error")
    if isinstance(error, OSError) and error.errno in records.DISK_FULL:
        # A full disk under the run record: what ansible-runner began there is unreadable.
        artifacts = Path(kwargs["artifact_dir"]) / str(kwargs["ident"])
        shutil.rmtree(artifacts, ignore_errors=True)
        raise RecordError(f"cannot write ansible-runner's artifacts under {artifacts}: "
                          f"{error.strerror}") from error
    if error is not None:
        raise PlaybookError(f"ansible-runner could not start {playbook}: {error}") from error
    return box["runner"]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"
