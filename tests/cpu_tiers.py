"""A CPU tier for the suite's background work: the lab's tests first, the rest in what they leave.

scripts/test.sh runs the lab's integration tests (the suite's critical path) beside the unit
tests, molecule's scenarios and the ansible-core 2.21 pass. `nice` cannot order them: with
the kernel's autogroups (``kernel.sched_autogroup_enabled``, on by default in Debian's and
Ubuntu's kernels) each session is scheduled as one group whatever its processes' nice
values, ansible-runner starts ansible-playbook in a session of its own (pexpect), and
podman's containers have cgroups of their own. Measured here on 2026-12-01 (2 cores): two
busy loops in sessions of their own at nice 10 took as much CPU as two at nice 0
(benchmarks/cpu_tier.py). A cpu cgroup of low weight does order them: every process started
inside stays inside, whatever its session, and podman puts a container there with
``--cgroup-parent`` (cgroupfs manager).

The tier is the suite's own cgroup in cgroup v1's cpu hierarchy (``/sys/fs/cgroup/cpu``,
``cpu.shares``), named for the pid of the scripts/test.sh that made it. Elsewhere (cgroup
v2, not root) none is made and the suite runs untiered, only slower: v2 would need the
root's controllers changed and a leaf of its own for the joined processes, which nothing
here has tested.

    python -m tests.cpu_tiers create NAME          print the tier's path (nothing: none made)
    python -m tests.cpu_tiers run PATH -- ARGV...  run ARGV in the tier (untiered where it is gone)
    python -m tests.cpu_tiers podman-parent PATH   podman's --cgroup-parent for the tier
    python -m tests.cpu_tiers remove PATH          end what is left in it, and remove it
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CPU = CGROUP_ROOT / "cpu"
# The environment variable that names the background tier for the suite's children
# (tests/molecule/runs.py, scripts/ansible-next.sh).
ENV = "NODETUNE_TEST_BACKGROUND_CGROUP"
# The tier's weight against the default 1024 of every other group (cpu.shares).
SHARES = 128
# The suite's tiers are named for the pid of the scripts/test.sh that made them.
OWN = re.compile(r"nodetune-test-(\d+)-[a-z]+")


def _ours(path: Path) -> bool:
    """Whether ``path`` is one of the suite's tiers (never another cgroup of the machine)."""
    return path.parent == V1_CPU and OWN.fullmatch(path.name) is not None


def create(name: str, shares: int = SHARES) -> Path | None:
    """The tier ``name`` with ``shares`` (the default of any other group is 1024); None where
    no cpu cgroup can be made here. The suite's tiers left by a test.sh that no longer runs
    (killed before its clean-up) are removed first."""
    path = V1_CPU / name
    if not _ours(path):
        raise ValueError(f"cgroup name {name!r}: expected nodetune-test-PID-WORD")
    if not (V1_CPU / "cpu.shares").exists():
        return None
    for stale in V1_CPU.glob("nodetune-test-*"):
        own = OWN.fullmatch(stale.name)
        if own and stale != path and not Path("/proc", own.group(1)).exists():
            remove(stale)
    try:
        path.mkdir()
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        (path / "cpu.shares").write_text(f"{max(2, shares)}\n")
    except OSError:
        remove(path)
        return None
    return path


def join(path: Path, pid: int) -> bool:
    """Move process ``pid`` into the tier; its later children start there. False where the
    tier is gone or the move is refused (the process then runs untiered)."""
    if not _ours(path):
        return False
    try:
        (path / "cgroup.procs").write_text(f"{pid}\n")
    except OSError:
        return False
    return True


def run_argv(path: str, argv: list[str]) -> list[str]:
    """``argv`` as a command that first moves itself into the tier at ``path`` (``run``)."""
    return [sys.executable, "-m", "tests.cpu_tiers", "run", path, "--", *argv]


def weight(path: Path) -> int:
    """The tier's weight as the kernel holds it."""
    return int((path / "cpu.shares").read_text())


def podman_parent(path: Path) -> str:
    """The ``--cgroup-parent`` that puts a podman container (cgroupfs manager) in the tier."""
    return "/" + str(path.relative_to(V1_CPU))


def _procs(tops: list[Path]) -> list[int]:
    pids = []
    for top in tops:
        for procs in top.rglob("cgroup.procs"):
            try:
                pids += [int(p) for p in procs.read_text().split()]
            except OSError:
                continue
    return pids


def remove(path: Path, *, grace: float = 5.0) -> list[str]:
    """Remove the tier, and the cgroups of its name podman made in the other v1 hierarchies
    for a container placed there (with their ``conmon`` and container groups), deepest
    first. What still runs inside after ``grace`` seconds (a scenario or container that
    outlived a killed run; the tier holds only the suite's own work) is ended with SIGKILL.
    Returns what could not be removed, for the caller to name."""
    if not _ours(path):
        raise ValueError(f"{path}: not one of the suite's cpu tiers")
    tops = [top / path.name for top in CGROUP_ROOT.iterdir() if (top / path.name).is_dir()]
    deadline = time.monotonic() + grace
    while _procs(tops) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in _procs(tops):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    end = time.monotonic() + 5.0
    while _procs(tops) and time.monotonic() < end:
        time.sleep(0.1)
    left = []
    for top in tops:
        for sub in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
            try:
                sub.rmdir()
            except OSError:
                left.append(str(sub))
        try:
            top.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            left.append(str(top))
    return left


def main(argv: list[str]) -> int:
    usage = __doc__.rsplit("\n\n", 1)[1]
    if argv[:1] == ["create"] and len(argv) in (2, 3):
        made = create(argv[1], *(int(a) for a in argv[2:]))
        print(made or "")
        return 0
    if argv[:1] == ["run"] and len(argv) > 3 and argv[2] == "--":
        if argv[1]:
            join(Path(argv[1]), os.getpid())  # untiered where it is gone: slower, not failed
        os.execvp(argv[3], argv[3:])
    if argv[:1] == ["podman-parent"] and len(argv) == 2:
        print(podman_parent(Path(argv[1])))
        return 0
    if argv[:1] == ["remove"] and len(argv) == 2:
        left = remove(Path(argv[1]))
        for where in left:
            print(f"cpu tier: {where} is still in use, left in place", file=sys.stderr)
        return 1 if left else 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
