#!/usr/bin/env python3
"""A converged re-apply of the whole site against one `ansible all -m setup` (issue #17).

On an inventory whose nodes nodetune already converged (the script converges
them once first, untimed), runs side by side, alternating the order each round
(ABC.., ..CBA):

    setup       ansible all -i INV -m setup             (one full fact gathering)
    site        ansible-playbook -i INV playbooks/site.yml
    apply       nodetune apply INV                      (stdout/stderr pipes: plain lines)
    site+mito   site with Mitogen's mitogen_linear strategy      (--mitogen SITE_PACKAGES)
    apply+mito  apply with Mitogen's mitogen_linear strategy     (--mitogen SITE_PACKAGES)
    site@base   site from another checkout                       (--baseline CHECKOUT)
    apply@base  apply from another checkout                      (--baseline CHECKOUT)

and prints the median wall time of each, with the spread, and its ratio to
setup: the median over rounds of mode/setup, each ratio taken between runs of
the same round. CPU seconds (user + system of the whole process tree, from
wait4) are printed beside wall time. Every timed run must change nothing: a
run that reports a change (PLAY RECAP changed=N, apply's "N change(s)") or
fails stops the benchmark, because it would not be a converged re-apply.

Each checkout's plays run with that checkout's roles and collection content
(ANSIBLE_ROLES_PATH, ANSIBLE_CONFIG, and an ANSIBLE_COLLECTIONS_PATH whose
nodetune.cluster is that checkout, as `nodetune apply` does for itself), and
`nodetune apply` runs as `python -m nodetune` from the checkout's root, so the
baseline is the other checkout's code and playbooks, on the same nodes, the
same Python and the same ansible-core. Both checkouts must converge the nodes
to the same state, or each run would undo the other's.

Plain `ansible` and `ansible-playbook` reuse the SSH master connections of
ControlPersist (60 s) in ~/.ansible/cp between runs, as they do for an
operator; `nodetune apply` opens its own per run (nodetune.ansible.env).

Run it with the venv's python from the repository root:

    .venv/bin/python benchmarks/apply_converged.py inventory/lab --rounds 3
    .venv/bin/python benchmarks/apply_converged.py inventory/lab \\
        --baseline /work/wt-before --mitogen /tmp/mitovenv/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODES = ("setup", "site", "apply", "site+mito", "apply+mito", "site@base", "apply@base")
RECAP = re.compile(r"^\S+\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
APPLY_SUMMARY = re.compile(r"(\d+) change\(s\) in ")


def collections_dir(checkout: Path, work: Path) -> Path:
    """A directory whose ansible_collections/nodetune/cluster is ``checkout``."""
    root = work / f"collections-{checkout.name}"
    link = root / "ansible_collections" / "nodetune" / "cluster"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(checkout, target_is_directory=True)
    return root


def mitogen_env(site_packages: Path) -> dict[str, str]:
    """Mitogen's strategy plugin, from a separate install (not nodetune's dependencies)."""
    return {"PYTHONPATH": str(site_packages),
            "ANSIBLE_STRATEGY_PLUGINS": str(site_packages / "ansible_mitogen" / "plugins"
                                            / "strategy"),
            "ANSIBLE_STRATEGY": "mitogen_linear"}


def plan(mode: str, inventory: Path, base: Path | None, mitogen: Path | None, work: Path,
         env: dict[str, str]) -> tuple[list[str], Path, dict[str, str]]:
    """(argv, cwd, environment) of one mode's run."""
    checkout = base if mode.endswith("@base") and base else REPO
    run_env = {**env, "ANSIBLE_CONFIG": str(checkout / "ansible.cfg"),
               "ANSIBLE_ROLES_PATH": str(checkout / "roles"),
               "ANSIBLE_COLLECTIONS_PATH": str(collections_dir(checkout, work))}
    if "+mito" in mode:
        assert mitogen is not None
        run_env.update(mitogen_env(mitogen))
    if mode == "setup":
        return [str(BIN / "ansible"), "all", "-i", str(inventory), "-m", "setup"], checkout, run_env
    if mode.startswith("site"):
        return ([str(BIN / "ansible-playbook"), "-i", str(inventory),
                 str(checkout / "playbooks" / "site.yml")], checkout, run_env)
    # -m from the checkout's root: that checkout's nodetune, not an installed one.
    return [sys.executable, "-m", "nodetune", "apply", str(inventory)], checkout, run_env


def changes(mode: str, out: str) -> int:
    """How many changes the run reported (a converged run reports none)."""
    if mode == "setup":
        return 0
    if mode.startswith("site"):
        recaps = RECAP.findall(out)
        if not recaps or any(int(u) or int(f) for _c, u, f in recaps):
            return -1
        return sum(int(c) for c, _u, _f in recaps)
    match = APPLY_SUMMARY.search(out)
    return int(match.group(1)) if match else -1


def run_once(mode: str, inventory: Path, base: Path | None, mitogen: Path | None, work: Path,
             env: dict[str, str]) -> dict[str, Any]:
    """One timed run: wall and CPU seconds of the whole process tree; it must change nothing."""
    argv, cwd, run_env = plan(mode, inventory, base, mitogen, work, env)
    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=run_env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    rc = os.waitstatus_to_exitcode(status)
    changed = changes(mode, text)
    if rc != 0 or changed != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise SystemExit(f"{mode}: exit {rc}, {changed} change(s) (-1: unreadable); "
                         f"not a converged run: {' '.join(argv)}\n{tail}")
    return {"mode": mode, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime}


def measure(inventory: Path, modes: list[str], rounds: int, base: Path | None,
            mitogen: Path | None, work: Path, save: Path | None) -> list[dict[str, Any]]:
    """Converge once per checkout (untimed), then the rounds; modes alternate order."""
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(work / "runs"), "ANSIBLE_NOCOLOR": "1"}
    for var in ("ANSIBLE_STRATEGY", "ANSIBLE_STRATEGY_PLUGINS", "ANSIBLE_CONFIG",
                "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_ROLES_PATH", "PYTHONPATH"):
        env.pop(var, None)
    # Byte-compile each checkout's nodetune once, as an installed copy would be.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for checkout in [REPO, *([base] if base else [])]:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "nodetune")],
                       check=True, env=env)
    for warm in ["apply", *(["apply@base"] if base else [])]:
        argv, cwd, run_env = plan(warm, inventory, base, mitogen, work, env)
        print(f"  converging with {warm} (untimed)", flush=True)
        subprocess.run(argv, cwd=cwd, env=run_env, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            res = {**run_once(mode, inventory, base, mitogen, work, env), "round": r}
            out.append(res)
            print(f"  round {r + 1} {mode}: {res['wall']:.2f} s wall, {res['cpu']:.2f} s cpu",
                  flush=True)
            if save:
                save.write_text(json.dumps(out, indent=1))
    return out


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def report(results: list[dict[str, Any]]) -> None:
    """The table: medians, spread, ratio to setup within each round."""
    modes = [m for m in MODES if any(x["mode"] == m for x in results)]
    setup = {x["round"]: x for x in results if x["mode"] == "setup"}
    print("| run | wall s, median (min-max) | x setup, median (min-max) | cpu s, median |")
    print("|---|---:|---:|---:|")
    for mode in modes:
        mine = [x for x in results if x["mode"] == mode]
        walls = [x["wall"] for x in mine]
        ratios = [x["wall"] / setup[x["round"]]["wall"] for x in mine if x["round"] in setup]
        ratio = (f"{statistics.median(ratios):.1f} ({min(ratios):.1f}-{max(ratios):.1f})"
                 if ratios else "-")
        print(f"| {mode} | {statistics.median(walls):.2f} ({spread(walls)}) | {ratio} | "
              f"{statistics.median(x['cpu'] for x in mine):.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inventory", type=Path, nargs="?", default=REPO / "inventory" / "lab",
                    help="inventory of nodes to converge and re-apply (default inventory/lab)")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of each mode")
    ap.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                    help="another checkout of nodetune (e.g. a git worktree of main) to time "
                         "side by side: modes site@base, apply@base")
    ap.add_argument("--mitogen", type=Path, metavar="SITE_PACKAGES",
                    help="site-packages holding ansible_mitogen: modes site+mito, apply+mito")
    ap.add_argument("--modes", help=f"comma-separated, of {', '.join(MODES)} "
                                    "(default: every mode the options allow)")
    ap.add_argument("--save", type=Path, help="write every run's figures here (JSON), as they come")
    ap.add_argument("--report", type=Path, nargs="+", help="only print the table of saved runs")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    if args.report:
        report([x for path in args.report for x in json.loads(path.read_text())])
        return 0
    allowed = [m for m in MODES if ("+mito" not in m or args.mitogen)
               and ("@base" not in m or args.baseline)]
    modes = [m for m in args.modes.split(",") if m] if args.modes else allowed
    if "setup" not in modes or set(modes) - set(allowed):
        ap.error(f"--modes: setup and any of {', '.join(allowed[1:])}")
    if args.mitogen and not (args.mitogen / "ansible_mitogen").is_dir():
        ap.error(f"--mitogen {args.mitogen}: no ansible_mitogen there")
    base = args.baseline.resolve() if args.baseline else None
    if base and not (base / "playbooks" / "site.yml").is_file():
        ap.error(f"--baseline {base}: not a nodetune checkout")
    inventory = args.inventory.resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="nodetune-converged-"))
    version = subprocess.run([str(BIN / "ansible"), "--version"], capture_output=True,
                             text=True, check=True).stdout.splitlines()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; nproc {os.cpu_count()}; "
          f"{version}; {args.rounds} rounds; modes {', '.join(modes)}; work {work}", flush=True)
    results = measure(inventory, modes, args.rounds, base, args.mitogen, work, args.save)
    print()
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
