"""The node-local check as Slurm runs it: slurmd's ``HealthCheckProgram`` and a Prolog.

One run checks this node (:mod:`nodetune.check.local`: the same checks and
report as ``nodetune check``), writes ``report.json`` under :data:`STATE_DIR`,
and acts on this node only:

- a failed check drains the node with ``nodetune healthcheck: <check> <measured>,
  expected <expected>`` (one printable line of at most 255 bytes, one ``scontrol``
  argument whatever it holds), unless the node is out of service for another
  reason or Slurm holds its state (the shared policy, :mod:`nodetune.slurm.policy`);
- when every check passes again, the node is resumed only if it is drained with the
  very reason this program recorded (:data:`OWNED`) when it drained it, and each check
  it recorded that drain for was tested again (:func:`nodetune.slurm.policy.untested`):
  a state-only run does not lift an opted-in Prolog's drain for ``gpu.allreduce``. A
  ``drained.json`` without ``checks`` (written before they were recorded) is lifted as
  before. A reason merely shaped like nodetune's, or an admin's over it, stays.

What runs: as the HealthCheckProgram (every HealthCheckInterval, on nodes that may be
running jobs) it reads state only, as LBNL NHC does: no collective, no ``dcgmi diag``, no
ib_write_bw, no CUDA context, no torch import (torch's versions are read once per boot,
:mod:`nodetune.check.local_state`); each active check is reported as a skip saying so.
As a Prolog (``--prolog``) or Epilog (``--epilog``) it reads state only too, unless the
site opted in (``--active``): then the all_reduce sweep and ``dcgmi diag`` run as in
``nodetune check``, and only while no job but this Prolog's/Epilog's own holds the node
(``squeue``, before and after; a job that arrived voids the active results). A Prolog
fails fast: exit 1 with the reason on stderr, so Slurm requeues the job. The active
checks otherwise run only where nodetune holds the node: ``nodetune check --launcher
slurm`` (``--report``, in its own exclusive allocation).

Xids and RDMA error counters count from this node's previous check, kept in the state
directory (:mod:`nodetune.check.local_state`): a node resumed after an Xid is not drained
again for the same Xid, nor by a run that read it still drained before the resume
(:func:`returned_during`).

Exit codes: 0 all checks passed, 1 a check failed, 2 bad configuration,
3 Slurm or the node could not be read (the node is then left as it is).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from nodetune.check import health, local, local_state, xid
from nodetune.check.model import NodeChecks
from nodetune.check.signal_read import Previous
from nodetune.check.slurm_decide import Decision, decide
from nodetune.errors import ExitCode, InputError, NodetuneError
from nodetune.files import write_atomic
from nodetune.slurm.reasons import drain_command, resume_command
from nodetune.slurm.state import SlurmNode, parse_jobs, parse_nodes

STATE_DIR = Path("/var/lib/nodetune/healthcheck")
OWNED = "drained.json"   # the reason this program drained its node with
REPORT = "report.json"
LOCK = Path("/run/nodetune-healthcheck.lock")
SCONTROL_TIMEOUT = 30.0


def _run_slurm(argv: Sequence[str], slurm_node: str) -> str:
    """What one of Slurm's commands (sinfo, squeue, scontrol) prints.

    Raises:
        NodetuneError: it could not run, timed out or failed (exit 3), naming the command
            (its first words: a drain's reason is not repeated).
    """
    what = " ".join(argv[:4])
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodetuneError(f"`{what}` failed: {exc}", host=slurm_node) from None
    if proc.returncode != 0:
        raise NodetuneError(f"`{what}` failed: {proc.stderr.strip()[-300:]}",
                            host=slurm_node)
    return proc.stdout


def read_node(slurm_node: str) -> SlurmNode:
    """This node as slurmctld reports it.

    Raises:
        NodetuneError: sinfo failed or does not list the node (exit 3).
    """
    out = _run_slurm(["sinfo", "--json", "--nodes", slurm_node], slurm_node)
    try:
        nodes = parse_nodes(out)
    except ValueError as exc:
        raise NodetuneError(str(exc), host=slurm_node) from None
    if slurm_node not in nodes:
        raise NodetuneError(f"Slurm does not list node {slurm_node}", host=slurm_node)
    return nodes[slurm_node]


def scontrol(argv: Sequence[str], slurm_node: str) -> None:
    """Run one ``scontrol`` command (an argument list: no shell reads the reason)."""
    _run_slurm(argv, slurm_node)


def _owned(state_dir: Path, slurm_node: str) -> tuple[str | None, tuple[str, ...] | None]:
    """(the reason this program drained ``slurm_node`` with, the checks it drained it for);
    None for what is not recorded (``checks``: a drained.json from before they were)."""
    try:
        doc = json.loads((state_dir / OWNED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(doc, dict) or doc.get("slurm_node") != slurm_node:
        return None, None
    reason, names = doc.get("reason"), doc.get("checks")
    return (reason if isinstance(reason, str) else None,
            tuple(str(n) for n in names) if isinstance(names, list) else None)


def act(decision: Decision, slurm_node: str, state_dir: Path) -> None:
    """Carry out ``decision``; the drain is recorded before scontrol runs, so that a drain
    that went through is always known as this program's."""
    owned = state_dir / OWNED
    if decision.action == "drain":
        write_atomic(owned, json.dumps({"slurm_node": slurm_node, "reason": decision.reason,
                                        "checks": list(decision.checks),
                                        "at": time.time()}) + "\n", mode=0o600)
        scontrol(drain_command(slurm_node, decision.reason), slurm_node)
    elif decision.action == "resume":
        scontrol(resume_command(slurm_node), slurm_node)
    if decision.forget:
        owned.unlink(missing_ok=True)


PASSIVE = ("{mode} mode reads state only (nothing runs on the GPUs or the links while a job "
           "may hold the node); the active checks run under `nodetune check --launcher slurm` "
           "(its own exclusive allocation){prolog}")
_OPT_IN = ", or in a Prolog/Epilog the site opts into (slurm_healthcheck_prolog_active)"


def other_jobs(slurm_node: str, own: str) -> tuple[str, ...]:
    """The jobs that hold ``slurm_node`` besides job ``own`` (this Prolog's or Epilog's).

    Raises:
        NodetuneError: squeue failed (exit 3).
    """
    out = _run_slurm(["squeue", "--json", "--nodelist", slurm_node], slurm_node)
    try:
        held = parse_jobs(out).get(slurm_node, ())
    except ValueError as exc:
        raise NodetuneError(str(exc), host=slurm_node) from None
    return tuple(j for j in held if j != own)


def _busy(config: local.LocalConfig, own: str) -> str | None:
    """Why an opted-in Prolog/Epilog may not run the active checks now (None: it may)."""
    try:
        others = other_jobs(config.slurm_node, own)
    except NodetuneError as exc:
        return f"no active check: whether another job holds the node is unknown ({exc.message})"
    if others:
        return (f"no active check: job(s) {', '.join(others)} hold the node beside job "
                f"{own or '?'} (nothing runs on a GPU another job may use)")
    return None


def _judge(checks: NodeChecks, node: SlurmNode | str, slurm_node: str, state_dir: Path, *,
           not_run: Collection[str], drain_unknown: bool = False
           ) -> tuple[ExitCode, dict[str, object], bool]:
    """Decide and act on ``node`` (as read at the run's end; a str: why it could not be
    read): (exit code, report.json's ``slurm``, whether the node is left out of service)."""
    try:
        if isinstance(node, str):
            raise NodetuneError(node, host=slurm_node)
        decision = decide(checks, node, *_owned(state_dir, slurm_node), not_run=not_run,
                          drain_unknown=drain_unknown)
        act(decision, slurm_node, state_dir)
    except NodetuneError as exc:
        return ExitCode.INFRASTRUCTURE, {"node": slurm_node, "error": exc.message}, False
    code = outcome(checks)
    return code, {"node": slurm_node, "state_before": node.display_state,
                  "reason_before": node.reason, "action": decision.action,
                  "reason": decision.reason}, \
        decision.action == "drain" or "drain" in node.flags or node.out_of_service


def outcome(checks: NodeChecks) -> ExitCode:
    """1 on an error or a failure, else 5 where a check could not be assessed, else 0."""
    if checks.error is not None or checks.failures:
        return ExitCode.CHECK_FAILED
    return ExitCode.NOT_ASSESSED if checks.unknowns else ExitCode.OK


RETURNED = ("the node was returned to service during this run, which had read it out of "
            "service ({state}) and so counted the Xids that drained it: not judged now; the "
            "next run counts from after them")


def returned_during(before: SlurmNode | None, node: SlurmNode) -> bool:
    """Whether the node, out of service when the run read it first (``before``; read only
    where gpu.xid's count depended on it), is back in service at its end (``node``): a
    person resumed it meanwhile, and gpu.xid counted what that resume cleared."""
    return before is not None and before.out_of_service and not node.out_of_service


def run(config: local.LocalConfig, *, mode: str = "healthcheck", active: bool = False,
        state_dir: Path, timeout: float, drain_unknown: bool = False
        ) -> tuple[ExitCode, dict[str, object]]:
    """One health check of this node: check, report, then drain or resume it.

    ``mode``: "healthcheck" (slurmd's HealthCheckProgram: state only, always), "prolog" or
    "epilog" (state only unless ``active``, and then only while no other job holds the
    node, before and after the measurement). Xids and RDMA counters count from this
    node's previous check (:mod:`nodetune.check.local_state`). ``drain_unknown``: a node
    whose only findings are checks that could not be assessed is drained too.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    boot = local_state.boot_id()
    state = local_state.load(state_dir, config.slurm_node, boot)
    before: SlurmNode | None = None
    if state.xid_held:  # whether the node came back into service decides where Xids count
        try:
            before = read_node(config.slurm_node)
        except NodetuneError:
            before = None
    state = local_state.cleared(state, before)
    own = os.environ.get("SLURM_JOB_ID", "")
    passive: str | None = PASSIVE.format(mode=mode, prolog="" if mode == "healthcheck"
                                         else _OPT_IN)
    if mode != "healthcheck" and active:
        passive = _busy(config, own)
    versions = local_state.VersionCache(state_dir, timeout=timeout, boot=boot)
    checks = local.check_self(config, timeout=timeout, passive=passive, versions=versions,
                              previous=local_state.previous(state))
    arrived = _busy(config, own) if passive is None else None
    if arrived is not None:
        checks = local.without_active(checks, f"measured while a job arrived, no verdict: "
                                      f"{arrived}")
    try:
        node: SlurmNode | str = read_node(config.slurm_node)
    except NodetuneError as exc:
        node = exc.message
    returned = isinstance(node, SlurmNode) and returned_during(before, node)
    if returned:
        checks = local.without(checks, xid.NAME, RETURNED.format(
            state=before.display_state if before else "?"))
    doc: dict[str, object] = local.report(config, checks, mode=mode)
    doc["active"] = {"ran": passive is None, "why_not": passive,
                     "not_run": sorted(local.ACTIVE) if passive is not None else []}
    if versions.source:
        doc["versions_read"] = versions.source  # the cache's source; "versions" is the fleet's
    code, doc["slurm"], out_of_service = _judge(
        checks, node, config.slurm_node, state_dir,
        not_run=local.ACTIVE if passive or arrived else (), drain_unknown=drain_unknown)
    # A node returned to service during the run keeps its Xids held: the next run reads
    # it in service and counts from after them (local_state.cleared).
    local_state.save(state_dir, config.slurm_node, boot, state, checks.health,
                     out_of_service=out_of_service or returned)
    doc["exit_code"] = int(code)
    write_atomic(state_dir / REPORT, json.dumps(doc, indent=2) + "\n")
    return code, doc


def _previous(path: Path | None, host: str) -> Previous | None:
    """This node's entry of the controller's previous-check file (None: no file given).

    Raises:
        InputError: the file is unreadable or not what the controller writes.
    """
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--previous-file {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise InputError(f"--previous-file {path}: not a mapping of host: previous check")
    return health.previous_from(doc.get(host) or {}, source=f"--previous-file {path}")


def report_only(path: Path, *, timeout: float, previous: Path | None = None) -> int:
    """``--report``: check this node and print the report (:func:`local.report_lines`);
    Slurm is not asked and nothing is drained, resumed or recorded (the controller's
    ``nodetune check --launcher slurm`` judges and acts, and passes its own record of
    each node's previous check in a file (``previous``), so gpu.xid and fabric.rdma_errors count
    from the same point as ``check`` over SSH)."""
    try:
        config = local.load_config(path)
        prev = _previous(previous, config.host)
        checks = local.check_self(config, timeout=timeout, previous=prev)
    except InputError as exc:
        print(f"nodetune-healthcheck: {exc.message}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    doc = local.report(config, checks, mode="report")
    print("\n".join(local.report_lines(doc)), flush=True)
    return int(outcome(checks))


SITE_VAR = "NODETUNE_HEALTHCHECK_SITE"


def add_site() -> None:
    """The role's wrapper starts this program under ``python -S`` (no site-packages read on
    every HealthCheckInterval) and names in ``NODETUNE_HEALTHCHECK_SITE`` the one directory
    it needs from there (PyYAML's): it goes after the standard library on ``sys.path``, and
    is not passed on to the programs this one starts (the probe, a torch venv's Python),
    whose own packages it would shadow."""
    site = os.environ.pop(SITE_VAR, "")
    if site and site not in sys.path:
        sys.path.append(site)


def main(argv: Sequence[str] | None = None) -> int:
    add_site()
    parser = argparse.ArgumentParser(prog="nodetune-healthcheck", description=__doc__.split(
        "\n")[0])
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--prolog", action="store_true",
                      help="as slurmd's Prolog: fail fast (state only unless --active)")
    when.add_argument("--epilog", action="store_true",
                      help="as slurmd's Epilog (state only unless --active)")
    parser.add_argument("--active", action="store_true",
                        help="with --prolog/--epilog: also the all_reduce sweep and dcgmi diag, "
                             "while no other job holds the node")
    parser.add_argument("--drain-unknown", action="store_true",
                        help="also drain a node whose only findings are checks that could "
                             "not be assessed (a tool hung or crashed); without it such a "
                             "node is neither drained nor resumed")
    parser.add_argument("--config", type=Path, default=local.CONFIG)
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    parser.add_argument("--lock", type=Path, default=LOCK, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--report", action="store_true",
                        help="check only: print the report (chunked lines), act on nothing "
                             "(nodetune check --launcher slurm)")
    parser.add_argument("--previous-file", type=Path, metavar="FILE",
                        help="with --report: the controller's summary of each node's previous "
                             "check, by host (where gpu.xid and fabric.rdma_errors count from)")
    args = parser.parse_args(argv)
    mode = "prolog" if args.prolog else "epilog" if args.epilog else "healthcheck"
    if args.active and (mode == "healthcheck" or args.report):
        parser.error("--active goes with --prolog or --epilog only: the HealthCheckProgram "
                     "reads state only")
    if args.report:
        return report_only(args.config, timeout=args.timeout, previous=args.previous_file)
    try:
        lock = open(args.lock, "w")  # noqa: SIM115 - held for the whole run
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("nodetune-healthcheck: another run is in progress", file=sys.stderr)
        return int(ExitCode.OK)
    try:
        config = local.load_config(args.config)
        code, doc = run(config, mode=mode, active=args.active, state_dir=args.state_dir,
                        timeout=args.timeout, drain_unknown=args.drain_unknown)
    except InputError as exc:
        print(f"nodetune-healthcheck: {exc.message}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    slurm = doc.get("slurm") or {}
    assert isinstance(slurm, dict)
    line = slurm.get("error") or f"{slurm.get('action')}: {slurm.get('reason')}"
    print(f"nodetune-healthcheck {config.slurm_node}: {line}",
          file=sys.stderr if code else sys.stdout)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
