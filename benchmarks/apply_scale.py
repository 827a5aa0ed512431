#!/usr/bin/env python3
"""How apply's wall time grows with hosts and forks, and what nodetune adds to Ansible's time.

For N local-connection hosts (``ansible_connection: local``, this machine's
venv python), runs the same converged play side by side, alternating, in each
round:

    ansible    ansible-playbook -i INV PLAY           (the venv's, same ansible.cfg)
    callback   the same with ansible-runner's event callback (awx_display, event files,
               jsonfile fact cache) and nothing reading its events: the share of the
               overhead paid inside ansible-playbook
    nodetune   nodetune apply INV --playbook PLAY     (stderr a pipe: plain progress lines)
    json       nodetune apply INV --playbook PLAY --json
    live       nodetune apply ... with stderr on a pseudo-terminal (the live table)

and prints, per N and forks, the median wall time of each and nodetune's
overhead: the median over rounds of nodetune/ansible - 1, each ratio taken
between runs of the same round. CPU seconds (user + system of the whole
process tree, from wait4) are printed beside wall time: on a small machine
the CPU nodetune spends is what turns into wall time.

The play (``--print-play`` prints it) is a trimmed stand-in for a
converged site run, safe to run as root here: it reads state (a setup of
the min subset, a command with changed_when: false, a local fact file),
renders a template and a copy into a scratch directory per host (converged
after the untimed warm-up run), sets facts, asserts, reports set_stats, and
skips tasks the way gated roles do. It changes no sysctl, interface, package
or file outside the scratch directory.

Run it with the venv's python from the repository root, so that
``python -m nodetune`` runs this tree's code (not an installed copy):

    .venv/bin/python benchmarks/apply_scale.py --hosts 32,16,8,4,2,1 --rounds 3
    .venv/bin/python benchmarks/apply_scale.py --hosts 16,32 --forks 32

``--forks F`` runs each N with forks = min(N, F) (default 10, apply's default).
Each run's nodetune report.json gives ``duration_s`` (ansible-runner's share),
so nodetune's overhead splits into its start-up and record (wall - runner)
and the runner's event path (runner - ansible).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODES = ("ansible", "callback", "nodetune", "json", "live")

# A converged run in miniature, in 3 plays like inputs -> facts -> roles: per host,
# 21 tasks of which 4 run a module on the host (setup min, command, template, copy),
# 9 are skipped (one a meta task) and 8 run on the controller only (set_fact, assert,
# set_stats, debug).
# Cheap tasks make the test harder for nodetune: its cost is per event, not per module.
PLAY = """\
---
- name: Check inputs on every host first
  hosts: "{{ nodetune_hosts | default('gpu_nodes') }}"
  gather_facts: false
  tasks:
    - name: Skip hosts already checked
      ansible.builtin.meta: end_host
      when: scale_checked | default(false) | bool
    - name: Gather facts (min subset)
      ansible.builtin.setup:
        gather_subset: ["!all", "min"]
    - name: Check the inputs
      ansible.builtin.assert:
        that:
          - scale_rmem_max | int > 0
          - scale_mtu | int >= 1500
        quiet: true
    - name: Report input errors (skipped, none)
      ansible.builtin.set_stats:
        data:
          scale_input_errors: "{{ {inventory_hostname: ['never']} }}"
      when: scale_mtu | int < 1500
    - name: Remember that inputs are checked
      ansible.builtin.set_fact:
        scale_checked: true

- name: Read node facts
  hosts: "{{ nodetune_hosts | default('gpu_nodes') }}"
  gather_facts: false
  tasks:
    - name: Read the local facts
      ansible.builtin.set_fact:
        scale_facts: "{{ lookup('file', scale_root ~ '/nodetune.fact') | from_json }}"
    - name: Report node facts to the controller
      ansible.builtin.set_stats:
        data:
          scale_facts: "{{ {inventory_hostname: scale_facts} }}"
        per_host: false
        aggregate: true

- name: Tune (converged, nothing changes)
  hosts: "{{ nodetune_hosts | default('gpu_nodes') }}"
  gather_facts: false
  tasks:
    - name: Install the driver (skipped, no GPU here)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.gpus | int > 0
    - name: Install the container toolkit (skipped)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.gpus | int > 0
    - name: Install OFED (skipped, no Mellanox NIC)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.mlx | bool
    - name: Load the OFED modules (skipped)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.mlx | bool
    - name: Read the live socket buffer limit
      ansible.builtin.command: cat /proc/sys/net/core/rmem_max
      changed_when: false
      register: scale_rmem_live
    - name: Compare with the wanted value
      ansible.builtin.set_fact:
        scale_rmem_ok: "{{ scale_rmem_live.stdout | int > 0 }}"
    - name: Write the sysctl drop-in
      ansible.builtin.template:
        src: sysctl.conf.j2
        dest: "{{ scale_root }}/90-nodetune.conf"
        mode: "0644"
    - name: Apply the sysctls (skipped, file unchanged)
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Write /etc/nccl.conf
      ansible.builtin.copy:
        content: "NCCL_SOCKET_IFNAME={{ scale_ifname }}\\nNCCL_IB_TC=106\\n"
        dest: "{{ scale_root }}/nccl.conf"
        mode: "0644"
    - name: Persist the MTU (skipped, no fabric interface)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.fabric | length > 0
    - name: RoCE QoS (skipped, no RDMA device)
      ansible.builtin.debug:
        msg: never
      when: scale_facts.rdma | length > 0
    - name: Check what was applied
      ansible.builtin.assert:
        that: scale_rmem_ok | bool
        quiet: true
    - name: Report hosts that need a reboot
      ansible.builtin.set_stats:
        data:
          scale_reboot_required: "{{ {inventory_hostname: []} }}"
        per_host: false
        aggregate: true
    - name: Say done
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }} converged"
"""

TEMPLATE = """\
# Managed by nodetune
net.core.rmem_max = {{ scale_rmem_max }}
net.core.wmem_max = {{ scale_rmem_max }}
net.ipv4.tcp_mtu_probing = 1
"""

MODULE_RUNS_PER_HOST = 4
TASKS_PER_HOST = 21


def write_fixture(work: Path, n: int) -> tuple[Path, Path]:
    """Inventory of ``n`` local hosts (each with a scratch root) and the play."""
    work.mkdir(parents=True, exist_ok=True)
    play = work / "play.yml"
    play.write_text(PLAY)
    (work / "templates").mkdir(exist_ok=True)
    (work / "templates" / "sysctl.conf.j2").write_text(TEMPLATE)
    hosts = {}
    for i in range(n):
        name = f"scale-{i:03d}"
        root = work / "roots" / name
        root.mkdir(parents=True, exist_ok=True)
        (root / "nodetune.fact").write_text(
            json.dumps({"gpus": 0, "mlx": False, "rdma": [], "fabric": []}))
        hosts[name] = {"scale_root": str(root)}
    inv = work / f"inventory-{n}.yml"
    inv.write_text(json.dumps({"gpu_nodes": {
        "hosts": hosts,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "scale_rmem_max": 268435456, "scale_mtu": 9000, "scale_ifname": "eth0"},
    }}, indent=1))
    return inv, play


def command(mode: str, inv: Path, play: Path, forks: int) -> list[str]:
    if mode in ("ansible", "callback"):
        return [str(BIN / "ansible-playbook"), "-i", str(inv), "-f", str(forks), str(play)]
    # -m from the repository root: this tree's nodetune, not an installed one.
    cmd = [sys.executable, "-m", "nodetune", "apply", str(inv), "--playbook", str(play),
           "--forks", str(forks)]
    return [*cmd, "--json"] if mode == "json" else cmd


def callback_env(env: dict[str, str], work: Path) -> dict[str, str]:
    """ansible-runner's additions to ansible-playbook's environment (RunnerConfig), alone."""
    from ansible_runner.utils import get_callback_dir

    events = work / "callback-run"
    shutil.rmtree(events, ignore_errors=True)
    (events / "job_events").mkdir(parents=True)
    return {**env, "ANSIBLE_CALLBACK_PLUGINS": get_callback_dir(),
            "ANSIBLE_STDOUT_CALLBACK": "awx_display", "AWX_ISOLATED_DATA_DIR": str(events),
            "ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_CACHE_PLUGIN": "jsonfile",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(events / "fact_cache"),
            "RUNNER_OMIT_EVENTS": "False", "RUNNER_ONLY_FAILED_EVENTS": "False"}


def run_once(mode: str, inv: Path, play: Path, forks: int, env: dict[str, str],
             runs: Path) -> dict[str, Any]:
    """One timed run: wall and CPU seconds of the whole process tree, exit code."""
    if mode == "callback":
        env = callback_env(env, runs.parent)
    stderr: Any = subprocess.DEVNULL
    master = slave = -1
    drain = None
    if mode == "live":
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
        stderr = slave

        def read() -> None:
            with contextlib.suppress(OSError):
                while os.read(master, 65536):
                    pass

        drain = threading.Thread(target=read, daemon=True)
    before = set(runs.iterdir()) if runs.is_dir() else set()
    t0 = time.monotonic()
    proc = subprocess.Popen(command(mode, inv, play, forks), cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    if drain is not None:
        os.close(slave)
        drain.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if drain is not None:
        drain.join(5)
        os.close(master)
    out: dict[str, Any] = {"mode": mode, "wall": wall, "rc": proc.returncode,
                           "cpu": usage.ru_utime + usage.ru_stime}
    if mode not in ("ansible", "callback"):
        new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
        if new:
            report = json.loads((new[-1] / "report.json").read_text())
            out["runner"] = float(report["duration_s"])
    if proc.returncode != 0:
        argv = " ".join(command(mode, inv, play, forks))
        raise SystemExit(f"{mode} exited {proc.returncode}: {argv}")
    return out


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def measure(counts: list[int], fork_cap: int, rounds: int, modes: list[str], work: Path,
            save: Path | None) -> list[dict[str, Any]]:
    """Every timed run, N by N; within a round the modes alternate order (ABCD, DCBA)."""
    runs = work / "runs"
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(runs),
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "TERM": os.environ.get("TERM") or "xterm-256color"}
    env.pop("COLUMNS", None)
    # Byte-compile nodetune once, as an installed copy would be, whatever this shell says.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "nodetune")],
                   check=True, env=env)
    out: list[dict[str, Any]] = []
    for n in counts:
        forks = min(n, fork_cap)
        inv, play = write_fixture(work, n)
        run_once("ansible", inv, play, forks, env, runs)  # warm-up: converges the scratch roots
        for r in range(rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                res = {**run_once(mode, inv, play, forks, env, runs), "round": r, "n": n,
                       "forks": forks}
                out.append(res)
                print(f"  N={n} forks={forks} round {r + 1} {mode}: {res['wall']:.2f} s wall, "
                      f"{res['cpu']:.2f} s cpu", flush=True)
                if save:
                    save.write_text(json.dumps(out, indent=1))
    return out


def report(results: list[dict[str, Any]]) -> None:
    """The table (medians, spread, overhead against ansible-playbook of the same round)."""
    modes = [m for m in MODES if any(x["mode"] == m for x in results)]
    cells = sorted({(x["n"], x["forks"]) for x in results})
    head = ["N", "forks", "ansible-playbook wall s"]
    head += [f"{m} wall s" for m in modes[1:]]
    head += [f"{m} overhead" for m in modes[1:]]
    head += ["ansible cpu s"] + [f"{m} cpu overhead" for m in modes[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for n, forks in cells:
        mine = [x for x in results if (x["n"], x["forks"]) == (n, forks)]
        base = {x["round"]: x for x in mine if x["mode"] == "ansible"}
        by = {m: [x for x in mine if x["mode"] == m and x["round"] in base] for m in modes}
        row = [str(n), str(forks)]
        for m in modes:
            walls = [x["wall"] for x in by[m]]
            row.append(f"{statistics.median(walls):.2f} ({spread(walls)})" if walls else "-")
        for key in ("wall", "cpu"):
            if key == "cpu":
                row.append(f"{statistics.median(x['cpu'] for x in by['ansible']):.1f}")
            for m in modes[1:]:
                ratios = [x[key] / base[x["round"]][key] - 1 for x in by[m]]
                if not ratios:
                    row.append("-")
                elif key == "wall":
                    row.append(f"{statistics.median(ratios):+.1%} "
                               f"({min(ratios):+.1%} to {max(ratios):+.1%})")
                else:
                    row.append(f"{statistics.median(ratios):+.1%}")
        print("| " + " | ".join(row) + " |")
    print("\nnodetune (plain) split, medians: wall - runner = start-up, inventory, record; "
          "runner - ansible = ansible-runner's event path and nodetune's event handling")
    for n, forks in cells:
        mine = [x for x in results if (x["n"], x["forks"]) == (n, forks)]
        base = {x["round"]: x for x in mine if x["mode"] == "ansible"}
        nt = [x for x in mine if x["mode"] == "nodetune" and "runner" in x and x["round"] in base]
        if nt:
            outside = statistics.median(x["wall"] - x["runner"] for x in nt)
            inside = statistics.median(x["runner"] - base[x["round"]]["wall"] for x in nt)
            print(f"  N={n} forks={forks}: {outside:.2f} s outside the runner, "
                  f"{inside:+.2f} s in it")
    xs, ys = [], []
    for n, forks in cells:
        xs.append(float(math.ceil(n / forks) * TASKS_PER_HOST))
        ys.append(statistics.median(x["wall"] for x in results if x["mode"] == "ansible"
                                    and (x["n"], x["forks"]) == (n, forks)))
    ns = [float(n) for n, _ in cells]
    print("\nmodels, least squares over the ansible-playbook medians:")
    if len(set(xs)) > 1:
        fit = statistics.linear_regression(xs, ys)
        print(f"  wall = a + b * ceil(N/forks) * tasks: a = {fit.intercept:.2f} s, "
              f"b = {fit.slope * 1000:.1f} ms ({TASKS_PER_HOST} tasks per host)")
    if len(set(ns)) > 1:
        fit = statistics.linear_regression(ns, ys)
        print(f"  wall = a + c * N: a = {fit.intercept:.2f} s, c = {fit.slope:.3f} s per host")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="32,16,8,4,2,1", help="host counts N, in run order")
    ap.add_argument("--forks", type=int, default=10, help="forks = min(N, FORKS)")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of each mode per N")
    ap.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    ap.add_argument("--save", type=Path, help="write every run's figures here (JSON), as they come")
    ap.add_argument("--report", type=Path, nargs="+", help="only print the tables of saved runs")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    ap.add_argument("--print-play", action="store_true", help="print the play and exit")
    args = ap.parse_args()
    if args.print_play:
        print(PLAY, end="")
        return 0
    if args.report:
        report([x for path in args.report for x in json.loads(path.read_text())])
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if "ansible" not in modes or set(modes) - set(MODES):
        ap.error(f"--modes: ansible and any of {', '.join(MODES[1:])}")
    work = args.work or Path(tempfile.mkdtemp(prefix="nodetune-scale-"))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; nproc {os.cpu_count()}; "
          f"{args.rounds} rounds; modes {', '.join(modes)}; work {work}", flush=True)
    results = measure([int(x) for x in args.hosts.split(",")], args.forks, args.rounds, modes,
                      work, args.save)
    print()
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
