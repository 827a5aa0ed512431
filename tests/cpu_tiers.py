"""A CPU tier for the suite's background work: the lab's tests first, the rest in what they leave.

scripts/test.sh runs the lab's integration tests (the suite's critical path) beside the unit
tests, molecule's scenarios and the ansible-core 2.21 pass. `nice` cannot order them: with
the kernel's autogroups (``kernel.sched_autogroup_enabled``, on by default in Debian's and
Ubuntu's kernels) each session is scheduled as one group whatever its processes' nice
values, ansible-runner starts ansible-playbook in a session of its own (pexpect), and
podman's containers have cgroups of their own. Measured here on 2026-12-01 (2 cores): two
busy loops in sessions of their own, one at nice 19, took 3.1 and 3.0 CPU-s of the same
6 s. A cpu cgroup with a low weight does order them: every process started inside stays
inside, whatever its session, and podman puts a container there with ``--cgroup-parent``
(cgroupfs manager). A busy loop in a cgroup of weight 2 started only once two loops of
the default weight had ended.

The tier is the suite's own cgroup (its name carries test.sh's pid) in the cpu hierarchy:
cgroup v1 (``/sys/fs/cgroup/cpu``, ``cpu.shares``) or v2 (``/sys/fs/cgroup``,
``cpu.weight``). Where neither can be made (not root, no cpu controller), nothing is
tiered and the suite runs as before, only slower.

    python -m tests.cpu_tiers create NAME SHARES   print the tier's path (nothing: none made)
    python -m tests.cpu_tiers join PATH PID        move PID (and what it starts later) there
    python -m tests.cpu_tiers podman-parent PATH   podman's --cgroup-parent for the tier
    python -m tests.cpu_tiers remove PATH          remove it (and what podman made beside it)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CPU = CGROUP_ROOT / "cpu"
# The environment variable that names the background tier for the suite's children
# (tests/molecule/runs.py, scripts/ansible-next.sh).
ENV = "NODETUNE_TEST_BACKGROUND_CGROUP"
DEFAULT_SHARES = 1024  # cgroup v1's default cpu.shares; v2's cpu.weight default is 100


def _v2_root() -> bool:
    controllers = CGROUP_ROOT / "cgroup.controllers"
    try:
        return "cpu" in controllers.read_text().split()
    except OSError:
        return False


# The suite's tiers are named for the pid of the scripts/test.sh that made them.
OWN = re.compile(r"nodetune-test-(\d+)-[a-z]+")


def create(name: str, shares: int) -> Path | None:
    """The tier ``name`` with ``shares`` (v1's scale: the default is 1024), made afresh; None
    where no cpu cgroup can be made here. The suite's tiers left by a test.sh that no longer
    runs (killed before its clean-up) are removed first, where nothing is inside them."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"cgroup name {name!r}: one path component expected")
    for top in (V1_CPU, CGROUP_ROOT):
        for stale in top.glob("nodetune-test-*"):
            own = OWN.fullmatch(stale.name)
            if own and stale.name != name and not Path("/proc", own.group(1)).exists():
                remove(stale)
    try:
        if (V1_CPU / "cpu.shares").exists():
            path = V1_CPU / name
            path.mkdir(exist_ok=True)
            (path / "cpu.shares").write_text(f"{max(2, shares)}\n")
            return path
        if _v2_root():
            control = CGROUP_ROOT / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu\n")
            path = CGROUP_ROOT / name
            path.mkdir(exist_ok=True)
            (path / "cpu.weight").write_text(f"{max(1, shares * 100 // DEFAULT_SHARES)}\n")
            return path
    except OSError:
        return None
    return None


def join(path: Path, pid: int) -> bool:
    """Move process ``pid`` into the tier; its later children start there. False where the
    tier is gone or the move is refused (the process then runs untiered)."""
    try:
        (path / "cgroup.procs").write_text(f"{pid}\n")
    except OSError:
        return False
    return True


def weight(path: Path) -> int:
    """The tier's weight as the kernel holds it (v1 shares or v2 weight)."""
    for name in ("cpu.shares", "cpu.weight"):
        if (path / name).exists():
            return int((path / name).read_text())
    raise FileNotFoundError(f"{path}: no cpu.shares or cpu.weight")


def podman_parent(path: Path) -> str:
    """The ``--cgroup-parent`` that puts a podman container (cgroupfs manager) in the tier."""
    root = V1_CPU if path.parent == V1_CPU else CGROUP_ROOT
    return "/" + str(path.relative_to(root))


def remove(path: Path) -> list[str]:
    """Remove the tier, and the cgroups of that name podman made in the other hierarchies for
    a container placed there (with their ``conmon`` and emptied container groups), deepest
    first. Returns what could not be removed (a process still inside), for the caller to name."""
    name = path.name
    tops = [path] if path.parent == CGROUP_ROOT else [
        top / name for top in CGROUP_ROOT.iterdir() if (top / name).is_dir()]
    left = []
    for top in tops:
        for sub in sorted((d for d in top.rglob("*") if d.is_dir()),
                          key=lambda d: -len(d.parts)):
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
    if argv[:1] == ["create"] and len(argv) == 3:
        made = create(argv[1], int(argv[2]))
        print(made or "")
        return 0
    if argv[:1] == ["join"] and len(argv) == 3:
        return 0 if join(Path(argv[1]), int(argv[2])) else 1
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
