"""``check --launcher slurm``: every node checks itself in one srun step of one exclusive
allocation, and the controller gathers what they report.

The nodes are taken as ``validate --launcher slurm`` takes them
(:func:`nodetune.slurm.allocation.allocated`: salloc ``--exclusive -w``, the same
partition, reservation, account and time options, cancelled whatever happens). One step
runs the node-local check the ``slurm_healthcheck`` role installed
(``nodetune-healthcheck --report``: :mod:`nodetune.check.local`, the same checks from the
same expectations) on every node at once; each prints its report on one line, read back
per node (:mod:`nodetune.slurm.step`) into the same :class:`NodeChecks` as an SSH check.
No SSH reaches a compute node: salloc and srun run on the controller. With ``--image``,
the image's ``container.*`` checklist follows in the same allocation
(:mod:`nodetune.check.slurm_image`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from nodetune.ansible.inventory import Host
from nodetune.check import health, local, slurm_image
from nodetune.check.model import NodeChecks, with_error
from nodetune.check.run import CheckOptions
from nodetune.container import runtime as ct
from nodetune.container import slurm_probe as sp
from nodetune.errors import InputError
from nodetune.records import runs_dir
from nodetune.remote.executor import Outcome, Stage, fault
from nodetune.slurm import allocation
from nodetune.slurm.allocation import Allocation, Held
from nodetune.slurm.commands import AllocOptions, NodeCommand
from nodetune.slurm.model import SlurmPlan
from nodetune.slurm.step import NodeStream

JOB_NAME = "nodetune-check"
# The controller's record of each node's previous check, staged in the run's directory.
PREVIOUS = "previous.json"
PROGRAM_VAR = "slurm_healthcheck_program"
PROGRAM = "/usr/local/sbin/nodetune-healthcheck"  # the role's default
_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,255}$")
# Beyond the node's own --timeout: python's start, slurmd's step launch, the output's way.
STEP_MARGIN_S = 60.0
END_WAIT_S = 10.0  # for srun to end once every node reported
_MISSING = re.compile(r"(?i)no such file|not found|exit(ed with)? (code|status) 127|"
                      r"execve.*failed")


def run_seconds(options: CheckOptions) -> float:
    """The longest a check run can take: one step of --timeout plus its margin, and the
    staging, and with --image the two probe steps (salloc's default ``--time`` follows
    it)."""
    return options.timeout + 2 * STEP_MARGIN_S + (
        0.0 if options.image is None else slurm_image.run_seconds(options.timeout))


def programs(hosts: Sequence[Host]) -> dict[str, str]:
    """Each host's node-local check program (``slurm_healthcheck_program``), checked.

    Raises:
        InputError: not an absolute path of plain characters (names the host and variable).
    """
    out = {}
    for h in hosts:
        path = h.vars.get(PROGRAM_VAR, PROGRAM)
        if not isinstance(path, str) or not _PATH.match(path):
            raise InputError(f"{PROGRAM_VAR} {path!r} is not an absolute path", host=h.name)
        out[h.name] = path
    return out


def _read(stream: NodeStream, host: str, got: dict[str, NodeChecks],
          said: dict[str, list[str]]) -> None:
    reader = local.ReportReader()
    for line in stream.lines():
        if not reader.feed(line):
            said[host].append(line)
            continue
        try:
            doc = reader.document()
            if doc is not None:
                got[host] = local.from_report(doc, host)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a malformed field
            said[host].append(f"unreadable report: {exc}")


def _missing(host: str, lines: list[str], *, timed_out: bool, timeout: float,
             program: str) -> NodeChecks:
    text = " | ".join(ln.strip() for ln in lines if ln.strip())[-300:]
    # The node's own program (the bare stage of the blame table): the node's fault.
    if timed_out:
        return with_error(NodeChecks(host), fault(
            Stage.NODE, Outcome.HUNG, f"no report within {timeout:g} s (the step was "
            f"cancelled){': ' + text if text else ''}", host=host))
    hint = (f"; {program} is not on the node: apply the slurm_healthcheck role"
            if _MISSING.search(text) else "")
    return with_error(NodeChecks(host), fault(
        Stage.NODE, Outcome.FAILED, f"the node-local check gave no report: "
        f"{text or 'no output'}{hint}", host=host))


def check_in_step(alloc: Allocation, hosts: Sequence[Host], options: CheckOptions,
                  paths: Mapping[str, str], *,
                  progress: Callable[[str, str], None]) -> dict[str, NodeChecks]:
    """One srun step of ``nodetune-healthcheck --report`` on every node of ``alloc``;
    every host's checks, or why it gave none (exit 3, or 4 past the timeout)."""
    commands = {alloc.names[h.name]: NodeCommand(env={"PYTHONUNBUFFERED": "1"}, argv=[
        paths[h.name], "--report", "--timeout", f"{options.timeout:g}", "--previous-file",
        f"{alloc.workdir}/{PREVIOUS}"]) for h in hosts}
    step = alloc.start_step(commands, name=JOB_NAME)
    for h in hosts:
        progress(h.name, f"srun step in job {alloc.job} (from {alloc.where})")
    got: dict[str, NodeChecks] = {}
    said: dict[str, list[str]] = {h.name: [] for h in hosts}
    readers = [threading.Thread(target=_read, args=(step.stream(alloc.names[h.name]), h.name,
                                                    got, said), daemon=True) for h in hosts]
    for t in readers:
        t.start()
    deadline = time.monotonic() + options.timeout + STEP_MARGIN_S
    while (time.monotonic() < deadline and not step.done.is_set()
           and len(got) < len(hosts)):
        step.wait(0.2)
    timed_out = not step.done.is_set() and len(got) < len(hosts)
    # Every node reported (or the time is up): srun ends by itself, else it is cancelled.
    if not step.wait(0.0 if timed_out else END_WAIT_S) and step.job_step is not None:
        alloc.cancel_step(step.job_step)
    for s in step.streams.values():
        s.close()
    step.wait(END_WAIT_S)
    for t in readers:
        t.join(END_WAIT_S)
    out = {}
    for h in hosts:
        out[h.name] = got.get(h.name) or _missing(
            h.name, said[h.name], timed_out=timed_out, timeout=options.timeout,
            program=paths[h.name])
        progress(h.name, out[h.name].error or "checked")
    return out


def check_inputs(hosts: Sequence[Host], options: CheckOptions) -> None:
    """What ``check --launcher slurm`` refuses before its Slurm plan is resolved
    (:func:`nodetune.slurm.prepare.prepare`) and :func:`check_nodes_slurm` runs.

    Raises:
        InputError: --rdma-peer (ib_write_bw reaches the peer over SSH), or bad container
            variables for --image (exit 2).
    """
    if options.rdma_peer is not None:
        raise InputError("--rdma-peer runs ib_write_bw between nodes over SSH: it does not "
                         "run under --launcher slurm")
    ct.check_request(hosts, options.image, launcher="slurm")


def check_nodes_slurm(planned: SlurmPlan, hosts: Sequence[Host], options: CheckOptions,
                      alloc_options: AllocOptions, *, held: Held,
                      progress: Callable[[str, str], None] = lambda _n, _m: None
                      ) -> dict[str, NodeChecks]:
    """Check ``hosts`` in one exclusive allocation (see the module's docstring), where
    ``planned`` says (:attr:`nodetune.slurm.prepare.Prepared.launcher`, after
    :func:`check_inputs`); the job is cancelled on the way out, Ctrl-C and errors included.

    Raises:
        InputError: a bad program path, an --image runtime the cluster lacks, or Slurm
            refused a name (exit 2).
        SlurmError: the allocation was refused or not granted in time (exit 3), with
            Slurm's own message (a job not shown cancelled at the end is recorded in
            ``held.alloc.teardown_error``, beside the results).
    """
    image = options.image
    paths = programs(hosts)
    alloc_options = dataclasses.replace(alloc_options, run_s=run_seconds(options),
                                        timeout_s=options.timeout)
    history = health.load_history(runs_dir())  # the controller's: as check over SSH reads it
    previous = {h.name: health.previous_doc(health.previous(h.name, history)) for h in hosts}
    before = None if image is None else (  # the cluster's container support: before salloc
        lambda session: sp.require_runtime(session, hosts, image, where=planned.where))
    with allocation.allocated(planned, alloc_options, job_name=JOB_NAME, before=before,
                              files={PREVIOUS: json.dumps(previous).encode(),
                                     **sp.staged_files(image)},
                              progress=lambda m: progress("slurm", m),
                              reap=lambda _run, workdir: {
                                  alloc_name: NodeCommand(env={}, argv=["rm", "-rf", "--",
                                                                        workdir])
                                  for alloc_name in planned.names.values()}) as alloc:
        held.alloc = alloc
        results = check_in_step(alloc, hosts, options, paths, progress=progress)
        if image is None:
            return results
        return slurm_image.with_image(alloc, hosts, results, image, timeout=options.timeout,
                                      progress=progress)
