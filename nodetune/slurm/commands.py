"""The Slurm commands of ``--launcher slurm``, as argument lists, and what they print.

salloc takes the nodes in one exclusive allocation (``--no-shell``: the job holds them
until scancel); sbcast copies the worker to every node of it; each pair is one srun
step of two tasks, one per node, started by a small ``sh`` script that picks each
node's command by ``$SLURMD_NODENAME``. Every argument here is one word of an argument
list (quoted once, by :func:`nodetune.remote.session.shell_command`, on the way through
the controller's shell); what goes into the script is quoted with :func:`shlex.quote`.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodetune.errors import InputError
from nodetune.remote.session import ENV_NAME, RUN_ID
from nodetune.slurm.model import SLURM_NAME

JOB_NAME = "nodetune-validate"
# Minutes an allocation may outlast the run's own estimate (staging, clearing, cancel).
TIME_MARGIN_MIN = 5
# "salloc: Granted job allocation 42" (salloc's own words, src/salloc/salloc.c)
_GRANTED = re.compile(r"Granted job allocation (\d+)")
# srun --label: "<task>: <line>", the task id padded to the widest one
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")
# The first line each task of a pair step prints (see step_script).
STEP_MARK = "nodetune-slurm-step"
_MARK = re.compile(rf"^{STEP_MARK} (\d+)\.(\d+) (\S+)$")
# A partition, reservation or account as Slurm names them; a time limit as --time reads it.
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^UNLIMITED$|^INFINITE$")
_GRES = re.compile(r"^[A-Za-z0-9_:,.-]{1,128}$")


@dataclass(frozen=True, slots=True)
class AllocOptions:
    """How the allocation is asked for (``--partition`` ... ``--slurm-wait``)."""

    partition: str | None = None
    reservation: str | None = None
    account: str | None = None
    time_limit: str | None = None
    gres: str | None = None
    wait_s: int = 60          # salloc --immediate: give up if not granted within this
    # The longest the run can take (its --timeout times its phases, as the verb counts
    # them): without --time-limit, salloc's --time is this plus TIME_MARGIN_MIN, so the
    # job ends by itself even if nodetune is killed outright.
    run_s: float | None = None
    timeout_s: float = 120.0  # the run's --timeout: the least the cancel waits for Slurm

    def time(self) -> str | None:
        """salloc's ``--time``: ``--time-limit`` if given, else from :attr:`run_s` (whole
        minutes), else None (the partition's own limit)."""
        if self.time_limit is not None:
            return self.time_limit
        if self.run_s is None:
            return None
        return str(math.ceil(self.run_s / 60) + TIME_MARGIN_MIN)

    def check(self) -> None:
        """Raises InputError naming the option whose value Slurm could not take as one word."""
        for option, value, pattern in (("--partition", self.partition, _WORD),
                                       ("--reservation", self.reservation, _WORD),
                                       ("--account", self.account, _WORD),
                                       ("--time-limit", self.time_limit, _TIME),
                                       ("--slurm-gres", self.gres, _GRES)):
            if value is not None and not pattern.match(value):
                raise InputError(f"{option} {value!r} is not a Slurm {option[2:]} value")
        if self.wait_s < 1:
            raise InputError(f"--slurm-wait {self.wait_s}: must be >= 1 s")


def _names(nodes: Sequence[str]) -> str:
    for n in nodes:
        if not SLURM_NAME.match(n):
            raise InputError(f"{n!r} is not one Slurm node name")
    return ",".join(nodes)


def salloc(nodes: Sequence[str], options: AllocOptions, *, run_id: str,
           name: str = JOB_NAME) -> list[str]:
    """``salloc`` for one exclusive allocation of exactly ``nodes``, no shell; the job's
    comment carries the run's id (:func:`by_comment` finds a job salloc did not name)."""
    if not RUN_ID.match(run_id):
        raise InputError(f"run id {run_id!r} is not hexadecimal")
    argv = ["salloc", "--no-shell", "--exclusive", f"--immediate={options.wait_s}",
            "-N", str(len(nodes)), "-w", _names(nodes), "-J", name,
            f"--comment=nodetune-run-{run_id}"]
    for flag, value in (("--partition", options.partition),
                        ("--reservation", options.reservation),
                        ("--account", options.account), ("--time", options.time()),
                        ("--gres", options.gres)):
        if value is not None:
            argv.append(f"{flag}={value}")
    return argv


def job_id(output: str) -> str | None:
    """The job id salloc granted, from its output (None: not granted)."""
    found = _GRANTED.search(output)
    return found.group(1) if found else None


def srun(job: str, nodes: Sequence[str], argv: Sequence[str], *, name: str,
         chdir: str | None = None, label: bool = False,
         container: Sequence[str] = ()) -> list[str]:
    """One step of ``job``: one task on each of ``nodes``, beside the job's other steps;
    ``container``: the options that start each task in a container (pyxis's
    ``--container-image`` ..., or Slurm's own ``--container``), placed last, before the
    command, whose first word then cannot be read as one of them."""
    out = ["srun", f"--jobid={job}", "--overlap", f"--job-name={name}",
           "-N", str(len(nodes)), "-n", str(len(nodes)), "--ntasks-per-node=1",
           "-w", _names(nodes), "--kill-on-bad-exit=0", "--quiet"]
    if chdir is not None:
        out.append(f"--chdir={chdir}")
    if label:
        out.append("--label")
    return [*out, *container, *argv]


def sbcast(job: str, source: str, dest: str) -> list[str]:
    """Copy ``source`` (on the controller) to ``dest`` on every node of ``job``."""
    return ["sbcast", f"--jobid={job}", "--force", source, dest]


def scancel(job: str, step: str | None = None) -> list[str]:
    """Cancel ``job`` (or one step of it): Slurm signals and ends every process of it."""
    return ["scancel", f"{job}.{step}" if step is not None else job]


def by_comment(name: str = JOB_NAME) -> list[str]:
    """squeue's ``<job id> <comment>`` of this job name, to find (and scancel) a job whose
    salloc was interrupted before it printed the id."""
    return ["squeue", "-h", "-n", name, "-o", "%i %k"]


def job_of_run(squeue_out: str, run_id: str) -> list[str]:
    """The ids of the jobs :func:`by_comment` lists for ``run_id``."""
    return [line.split()[0] for line in squeue_out.splitlines()
            if line.split()[1:] == [f"nodetune-run-{run_id}"]]


def squeue(job: str) -> list[str]:
    """The job's state and nodes (no header; nothing once it is gone)."""
    return ["squeue", "-h", "-j", job, "-o", "%i %T %N"]


def kill_wait(show_config: str) -> float | None:
    """Slurm's KillWait (seconds between SIGTERM and SIGKILL of a job's processes) from
    ``scontrol show config`` ("KillWait = 30 sec"), None if not listed."""
    found = re.search(r"(?m)^KillWait\s*=\s*(\d+)", show_config)
    return float(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class NodeCommand:
    """What one node of a step runs: its environment and its argument list."""

    env: Mapping[str, str]
    argv: Sequence[str]


def step_script(commands: Mapping[str, NodeCommand], *, cd: str | None = None) -> str:
    """The ``sh -c`` script every task of a step runs: it says which step and node it is
    (:data:`STEP_MARK`; ``$SLURMD_NODENAME``, else the host name), changes to ``cd`` if
    given (in a container, where Slurm's OCI
    support starts the step in ``/`` whatever ``--chdir`` says), then ``exec``\\ s the
    command for ``$SLURMD_NODENAME``.

    Raises:
        InputError: a node name that is not one Slurm name, or an environment name that
            is not a shell identifier.
    """
    cases = []
    for node, cmd in commands.items():
        _names([node])
        bad = [k for k in cmd.env if not ENV_NAME.match(k)]
        if bad:
            raise InputError(f"environment variable name {bad[0]!r} is not valid", host=node)
        words = ["env", *(f"{k}={v}" for k, v in cmd.env.items()), *cmd.argv]
        cases.append(f"  {shlex.quote(node)}) exec {shlex.join(words)} ;;")
    return "\n".join([
        # Slurm's OCI support (22.05) gives the container srun's environment, without
        # slurmd's SLURMD_NODENAME: the node's own (short) host name stands in there.
        'node="${SLURMD_NODENAME:-}"',
        '[ -n "$node" ] || { read -r node < /proc/sys/kernel/hostname; node="${node%%.*}"; }',
        'export SLURMD_NODENAME="$node"',  # the worker takes the specs sent to it by name
        f'echo "{STEP_MARK} $SLURM_JOB_ID.$SLURM_STEP_ID $node"',
        *([] if cd is None else [f"cd -- {shlex.quote(cd)} || exit 2"]),
        'case "$node" in', *cases,
        '  *) echo "no command for node $node" >&2; exit 2 ;;', "esac"])


def labelled(line: str) -> tuple[int, str] | None:
    """``(task, text)`` of one line of ``srun --label`` output (None: srun's own line)."""
    found = _LABELLED.match(line)
    return (int(found.group(1)), found.group(2)) if found else None


def step_mark(text: str) -> tuple[str, str, str] | None:
    """``(job, step, node)`` from a task's :data:`STEP_MARK` line, else None."""
    found = _MARK.match(text)
    return (found.group(1), found.group(2), found.group(3)) if found else None
