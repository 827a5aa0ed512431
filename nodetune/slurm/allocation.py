"""One exclusive Slurm allocation for ``validate --launcher slurm``: take it, stage the
worker on its nodes, start steps in it, and cancel it whatever happens.

Every command runs on the controller (``nodetune_slurm_controller``, over the SSH path
scontrol already uses; this machine when none is set): salloc, sbcast, srun and scancel
reach the compute nodes through slurmd. Nothing here opens SSH to a compute node.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from nodetune.errors import InputError, NodeTimeout, NodetuneError, SlurmError
from nodetune.remote import ssh
from nodetune.remote.session import Process, new_run_id
from nodetune.slurm import commands
from nodetune.slurm.commands import AllocOptions, NodeCommand
from nodetune.slurm.model import SlurmPlan
from nodetune.slurm.scontrol import connect
from nodetune.slurm.step import PairStep

log = logging.getLogger(__name__)

STAGE_TIMEOUT = 120.0
CANCEL_WAIT_S = 30.0
STATUS_WAIT_S = 5.0  # srun collected after its output ended (:func:`_status`)
KILL_WAIT_MARGIN_S = 30.0  # after KillWait's SIGKILL: slurmd's epilog and its report
# The run's directory on every node, named as the worker's sweep of earlier runs knows it;
# made by mkdir under umask 077, which fails if it exists.
WORKDIR = "/tmp/nodetune-validate.{}"  # noqa: S108
# salloc's refusals that are the input's fault (a name Slurm does not have): exit 2.
_BAD_INPUT = re.compile(r"(?i)invalid (partition|account|reservation|node name|qos)|"
                        r"partition .*(not|does not) exist|reservation .*(invalid|not)|"
                        r"not in partition|invalid time limit|invalid generic resource")


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What a short step printed: each node's lines (by Slurm name) and srun's own."""

    lines: Mapping[str, list[str]]
    srun: list[str]
    exit_status: int | None


@dataclass(slots=True)
class Allocation:
    """A granted job: its id, its nodes (inventory name: Slurm name), where the worker
    lies on them, and the steps started in it."""

    session: ssh.Session
    where: str
    job: str
    names: Mapping[str, str]
    run_id: str
    workdir: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False   # squeue showed the job gone after scancel, and only then
    teardown_error: str | None = None  # why the job could not be shown cancelled
    timeout_s: float = CANCEL_WAIT_S  # the run's --timeout
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_step(self, commands_by_node: Mapping[str, NodeCommand], *,
                   name: str, container: Sequence[str] = ()) -> PairStep:
        """One srun step running ``commands_by_node`` (Slurm name: command) at once, in
        the container ``container``'s srun options start (none: on the node itself)."""
        nodes = list(commands_by_node)
        argv = commands.srun(self.job, nodes, ["sh", "-c", commands.step_script(
            commands_by_node, cd=self.workdir if container else None)], name=name,
            chdir=self.workdir, label=True, container=container)
        entry: dict[str, Any] = {"name": name, "nodes": nodes, "step": None}
        with self.lock:
            self.steps.append(entry)
        return PairStep(self.session.start(argv), nodes, where=self.where,
                        on_mark=lambda job_step: entry.__setitem__("step", job_step))

    def run_step(self, commands_by_node: Mapping[str, NodeCommand], *, name: str,
                 timeout: float, container: Sequence[str] = ()) -> StepOutput:
        """A short step, run to its end: each node's lines, and srun's own.

        Raises:
            NodeTimeout: the step did not end within ``timeout`` (it is cancelled).
        """
        step = self.start_step(commands_by_node, name=name, container=container)
        ended = step.wait(timeout)  # (its commands read no stdin: it ends by itself)
        # srun's status before its channel is closed: a closed SSH channel reads as ended.
        status = _status(step.proc) if ended else None
        with suppress(Exception):  # the channel, once srun ended or is to be cancelled
            step.proc.close()
        if not ended:
            if step.job_step is not None:
                self.cancel_step(step.job_step)
            raise NodeTimeout(f"srun step {name} of job {self.job} did not end within "
                              f"{timeout:.0f} s", host=self.where)
        out = {n: list(s.queue.queue) for n, s in step.streams.items()}
        return StepOutput(lines={n: [ln for ln in v if ln is not None] for n, v in out.items()},
                          srun=list(step.srun_lines), exit_status=status)

    def cancel_step(self, job_step: str) -> None:
        """scancel one step (one already ended is no error)."""
        job, _, step = job_step.partition(".")
        with suppress(NodetuneError, OSError):
            self.session.run(commands.scancel(job, step), timeout=30)

    def to_dict(self) -> dict[str, Any]:
        """The job as report.json's ``slurm_job``."""
        doc = {"job_id": self.job, "controller": self.where, "nodes": dict(self.names),
               "workdir": self.workdir, "steps": [dict(s) for s in self.steps],
               "cancelled": self.cancelled}
        if self.teardown_error:
            doc["teardown_error"] = self.teardown_error
        return doc


def _refused(out: str, where: str, nodes: Sequence[str]) -> NodetuneError:
    said = " | ".join(ln.strip() for ln in out.strip().splitlines() if ln.strip())[-400:]
    message = (f"salloc on {where} did not grant an allocation of {', '.join(nodes)}: "
               f"{said or 'no output'}")
    return InputError(message) if _BAD_INPUT.search(out) else SlurmError(message, host=where)


def _run(session: ssh.Session, argv: Sequence[str], *, where: str,
         timeout: float) -> ssh.CommandResult:
    result = session.run(list(argv), timeout=timeout)
    if result.exit_status != 0:
        raise SlurmError(f"`{argv[0]}` failed on {where} (exit {result.exit_status}): "
                         f"{(result.stderr or result.stdout).strip()[-400:]}", host=where)
    return result


def _stage(alloc: Allocation, files: Mapping[str, bytes]) -> None:
    """Make the run's directory on every node (one step) and sbcast the files into it."""
    nodes = list(alloc.names.values())
    script = (f"umask 077 && mkdir -- {alloc.workdir} && printf '%s\\n' {alloc.run_id} "
              f"> {alloc.workdir}/run-id")
    _run(alloc.session, commands.srun(alloc.job, nodes, ["sh", "-c", script],
                                      name="nodetune-stage", label=True),
         where=alloc.where, timeout=STAGE_TIMEOUT)
    made = _run(alloc.session, ["mktemp", "-d"], where=alloc.where, timeout=30).stdout.strip()
    try:
        for name, data in files.items():
            alloc.session.upload(data, f"{made}/{name}", mode=0o600)
            _run(alloc.session, commands.sbcast(alloc.job, f"{made}/{name}",
                                                f"{alloc.workdir}/{name}"),
                 where=alloc.where, timeout=STAGE_TIMEOUT)
    finally:
        with suppress(NodetuneError, OSError):
            alloc.session.run(["rm", "-rf", "--", made], timeout=30)


def _clear(alloc: Allocation, reap: Mapping[str, NodeCommand]) -> None:
    """Reap what the run's id marks and remove its directory, on every node (one step)."""
    argv = commands.srun(alloc.job, list(reap), ["sh", "-c", commands.step_script(reap)],
                         name="nodetune-clear", chdir="/", label=True)
    with suppress(NodetuneError, OSError):
        result = alloc.session.run(argv, timeout=60)
        if result.exit_status != 0:
            log.warning("clearing job %s's nodes: %s", alloc.job, result.stderr.strip())


def cancel_wait(alloc: Allocation) -> float:
    """How long the cancel waits for squeue to drop the job: Slurm's KillWait (SIGTERM to
    SIGKILL) plus time for slurmd's epilog, and never less than the run's --timeout nor
    :data:`CANCEL_WAIT_S`."""
    wait = max(CANCEL_WAIT_S, alloc.timeout_s)
    with suppress(NodetuneError, OSError):
        shown = alloc.session.run(["scontrol", "show", "config"], timeout=30)
        kill_wait = commands.kill_wait(shown.stdout) if shown.exit_status == 0 else None
        if kill_wait is not None:
            wait = max(wait, kill_wait + KILL_WAIT_MARGIN_S)
    return wait


def gone(result: ssh.CommandResult) -> bool | None:
    """Whether ``squeue -j JOB`` showed the job gone: True when it listed nothing, or said
    the id is no longer known (slurmctld forgets an ended job after MinJobAge: squeue then
    fails with ``slurm_load_jobs error: Invalid job id specified``, from slurm_perror() on
    ESLURM_INVALID_JOB_ID, src/squeue/squeue.c and src/common/slurm_errno.c, read
    2026-11-29); False when it still lists it; None when squeue failed otherwise (the job's
    state is unknown, never taken as cancelled)."""
    if result.exit_status == 0:
        return not result.stdout.strip()
    if "invalid job id specified" in (result.stderr + result.stdout).lower():
        return True
    return None


def cancel(alloc: Allocation) -> None:
    """scancel the job and wait until squeue shows it gone (:func:`cancel_wait`,
    :func:`gone`); only then is it ``cancelled``.

    Raises:
        SlurmError: scancel failed; or the job is still listed after the wait (names the
            job, its state and the nodes it is still on, and what to look at); or squeue
            never answered (its own message).
        SSHError: the controller could not be reached.
    """
    _run(alloc.session, commands.scancel(alloc.job), where=alloc.where, timeout=30)
    wait = cancel_wait(alloc)
    deadline = time.monotonic() + wait
    while True:
        left = alloc.session.run(commands.squeue(alloc.job), timeout=30)
        shown = gone(left)
        if shown:
            alloc.cancelled = True
            return
        if time.monotonic() > deadline:
            if shown is None:
                said = (left.stderr or left.stdout).strip()[-300:] or "no output"
                raise SlurmError(f"`squeue -j {alloc.job}` failed on {alloc.where} (exit "
                                 f"{left.exit_status}: {said}) for {wait:g} s after scancel: "
                                 f"whether job {alloc.job} ended is unknown; look with "
                                 f"`squeue -j {alloc.job}`", host=alloc.where)
            raise SlurmError(still_listed(alloc.job, left.stdout, wait), host=alloc.where)
        time.sleep(0.5)


def tear_down(alloc: Allocation, reap: Mapping[str, NodeCommand],
              progress: Callable[[str], None] = lambda _m: None) -> None:
    """Reap the run's processes and cancel the job, never raising: what went wrong is
    kept on ``alloc.teardown_error`` (report.json's ``slurm_job``), beside the run's own
    verdict or error, which it never replaces."""
    with suppress(NodetuneError, OSError):
        _clear(alloc, reap)
    try:
        cancel(alloc)
    except (NodetuneError, OSError) as exc:
        alloc.teardown_error = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        log.warning("job %s: %s", alloc.job, alloc.teardown_error)
        progress(f"job {alloc.job} not shown cancelled: {alloc.teardown_error}")
        return
    progress(f"job {alloc.job} cancelled")


def still_listed(job: str, squeue_out: str, wait: float) -> str:
    """What is left of a job squeue still lists after scancel, in words."""
    fields = squeue_out.split()
    state = fields[1] if len(fields) > 1 else "listed"
    nodes = fields[2] if len(fields) > 2 else "its nodes"
    return (f"Slurm job {job} is still {state} on {nodes} {wait:g} s after scancel "
            f"(Slurm is still ending its processes there); look with `squeue -j {job}` and "
            f"`scontrol show job {job}`, and `scancel {job}` again if it stays")


def _cancel_unnamed(session: ssh.Session, run_id: str, name: str) -> None:
    """scancel the job of ``run_id`` if salloc was stopped before saying its id."""
    with suppress(NodetuneError, OSError):
        listed = session.run(commands.by_comment(name), timeout=30)
        for job in commands.job_of_run(listed.stdout, run_id):
            session.run(commands.scancel(job), timeout=30)


@dataclass(slots=True)
class Held:
    """The allocation of a run, once granted (None under the SSH launcher or before)."""

    launcher: str = "ssh"
    alloc: Allocation | None = None

    def doc(self) -> dict[str, Any]:
        """report.json's ``launcher`` (and ``slurm_job`` where a job was granted)."""
        if self.alloc is None:
            return {"launcher": self.launcher}
        return {"launcher": self.launcher, "slurm_job": self.alloc.to_dict()}


@contextmanager
def allocated(slurm_plan: SlurmPlan, options: AllocOptions, *, files: Mapping[str, bytes],
              reap: Callable[[str, str], Mapping[str, NodeCommand]],
              progress: Callable[[str], None] = lambda _m: None,
              job_name: str = commands.JOB_NAME,
              before: Callable[[ssh.Session], None] | None = None) -> Iterator[Allocation]:
    """The nodes of ``slurm_plan`` in one exclusive allocation, with ``files`` staged on
    each; on the way out (Ctrl-C and errors included) the ``reap`` step (given the run id
    and the work dir) runs and the job is cancelled (:func:`tear_down`: a cancel that
    fails is recorded on the allocation and never replaces what the run measured, nor
    the error that ended it). ``before`` is called with the controller's session before
    salloc (a refusal there allocates nothing).

    Raises:
        InputError: Slurm refused a partition, account, reservation or node name (exit 2).
        SlurmError: the allocation was refused or not granted in time, or staging failed
            (exit 3), with Slurm's own message.
    """
    options.check()
    names = dict(slurm_plan.names)
    with connect(slurm_plan) as scontrol:
        session = scontrol.session
        if before is not None:
            before(session)
        run_id = new_run_id()
        argv = commands.salloc(list(names.values()), options, run_id=run_id, name=job_name)
        progress(f"salloc on {slurm_plan.where}: {' '.join(argv[1:])}")
        try:
            got = session.run(argv, timeout=options.wait_s + 30)
        except BaseException:  # Ctrl-C, SIGTERM, a dropped connection: salloc may go on
            _cancel_unnamed(session, run_id, job_name)
            raise
        job = commands.job_id(got.stderr + "\n" + got.stdout)
        if got.exit_status != 0 or job is None:
            _cancel_unnamed(session, run_id, job_name)
            raise _refused(got.stderr + "\n" + got.stdout, slurm_plan.where, list(names.values()))
        alloc = Allocation(session=session, where=slurm_plan.where, job=job, names=names,
                           run_id=run_id, workdir=WORKDIR.format(run_id[:8]),
                           timeout_s=options.timeout_s)
        progress(f"job {job} holds {', '.join(names.values())}")
        try:
            _stage(alloc, files)
            yield alloc
        finally:
            tear_down(alloc, reap(run_id, alloc.workdir), progress)


def _status(proc: Process, wait: float = STATUS_WAIT_S) -> int | None:
    """srun's exit status once its output has ended: the output ends a moment before the
    process is collected, so it is polled for up to ``wait`` seconds (None past that)."""
    deadline = time.monotonic() + wait
    while (status := proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return status
