"""An operator's day on the lab (issue 29): apply's output with and without --diff, the
host-key flow of apply, the check matrix at 80 columns through a real pty, and `runs ID`."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from tests.conftest import NODETUNE, REPO, run_nodetune
from tests.integration.conftest import Lab

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _in_pty(*args: str, runs_dir: Path, columns: int = 80, timeout: float = 300) -> str:
    """Run nodetune on a real terminal of ``columns`` columns; its output without colours."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir), "TERM": "xterm"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([str(NODETUNE), *args], cwd=REPO, stdin=follower, stdout=follower,
                            stderr=follower, env=env, close_fds=True)
    os.close(follower)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    return ANSI.sub("", out.decode(errors="replace")).replace("\r", "")


def test_apply_prints_change_lines_without_diff_and_the_diff_with_it(lab: Lab,
                                                                     runs_dir: Path) -> None:
    converged = run_nodetune("apply", str(lab.inventory), runs_dir=runs_dir)
    assert converged.code == 0, converged.stdout + converged.stderr
    # The drift this test reads: node 0's sysctl file gone, put back afterwards (later modules
    # reboot node 0 and read its settings back at boot).
    conf = "/etc/sysctl.d/90-nodetune-net.conf"
    lab.sh(lab.nodes[0], "cp", "-a", conf, "/root/90-nodetune-net.conf.kept")
    lab.sh(lab.nodes[0], "rm", "-f", conf)
    try:
        quiet = run_nodetune("apply", str(lab.inventory), "--check", runs_dir=runs_dir)
        assert quiet.code == 0, quiet.stdout + quiet.stderr
        assert "Would change (" in quiet.stdout
        assert re.search(r"^  /etc/sysctl\.d/90-nodetune-net\.conf  \[.*\]  on 1 host: "
                         + re.escape(lab.nodes[0]) + "$", quiet.stdout, re.M), quiet.stdout
        assert "@@" not in quiet.stdout and "=== " not in quiet.stdout
        diff_file = re.search(r"^full diff: (\S+) \(or rerun with --diff\)$", quiet.stdout, re.M)
        assert diff_file and "+++ /etc/sysctl.d/90-nodetune-net.conf" in Path(
            diff_file.group(1)).read_text()
        loud = run_nodetune("apply", str(lab.inventory), "--check", "--diff", runs_dir=runs_dir)
        assert loud.code == 0, loud.stderr
        assert f"=== {lab.nodes[0]}: [" in loud.stdout and "@@" in loud.stdout
        assert "Would change (" not in loud.stdout
        gate = run_nodetune("apply", str(lab.inventory), "--check", "--fail-on-change",
                            runs_dir=runs_dir)
        assert gate.code == 1 and "changes found (--fail-on-change)" in gate.stdout
    finally:
        lab.sh(lab.nodes[0], "mv", "-f", "/root/90-nodetune-net.conf.kept", conf)


def test_apply_names_an_unknown_host_key_and_accepts_it_on_request(lab: Lab,
                                                                   runs_dir: Path) -> None:
    inv_text = (lab.inventory / "hosts.yml").read_text()
    known_file = re.search(r"UserKnownHostsFile=(\S+)", inv_text)
    assert known_file, inv_text
    known = Path(known_file.group(1))
    kept = known.read_text()
    node = lab.nodes[-1]
    try:
        # known_hosts names nodes by address: drop the line of the node's ansible_host.
        found = re.search(rf"{re.escape(node)}:\n\s+ansible_host: (\S+)", inv_text)
        assert found, inv_text
        address = found.group(1)
        known.write_text("".join(f"{ln}\n" for ln in kept.splitlines()
                                 if not ln.startswith(address + " ")))
        refused = run_nodetune("apply", str(lab.inventory), "--limit", node, "-t",
                               "nccl_config", runs_dir=runs_dir)
        assert refused.code == 3, refused.stdout + refused.stderr
        assert f"host key of {address} is unknown; add it with `ssh-keyscan {address} >> " \
            in refused.stdout
        retry = re.search(r"--limit @(\S+retry\.txt)", refused.stdout)
        assert retry and Path(retry.group(1)).read_text() == f"{node}\n"
        accepted = run_nodetune("apply", str(lab.inventory), "--limit", f"@{retry.group(1)}",
                                "-t", "nccl_config", "--accept-new-host-keys", runs_dir=runs_dir)
        assert accepted.code == 0, accepted.stdout + accepted.stderr
        assert any(ln.startswith(address + " ") for ln in known.read_text().splitlines())
    finally:
        known.write_text(kept)


def test_check_matrix_at_80_columns_and_runs_id(lab: Lab, runs_dir: Path) -> None:
    out = _in_pty("check", str(lab.inventory), "--skip-allreduce", runs_dir=runs_dir)
    table = out[out.index("checks per node"):out.index("verdicts")]
    rows = [ln for ln in table.splitlines() if ln.split()[:1] and ln.split()[0] in lab.nodes]
    headers = [ln for ln in table.splitlines() if ln.startswith("node ")]
    assert len(headers) >= 2, out  # the checks continue in a second table
    assert len(rows) == len(headers) * len(lab.nodes)
    # The matrix fits; findings and skip reasons below it are free text a terminal wraps.
    assert all(len(ln.rstrip()) <= 80 for ln in [*headers, *rows]), table
    assert "…" not in "".join([*headers, *rows])
    (run,) = [p.name for p in runs_dir.iterdir() if p.name.endswith("-check")]
    shown = _in_pty("runs", run, runs_dir=runs_dir)
    assert shown.startswith(f"check {lab.inventory}  run {run}\n"), shown
    assert "checks per node" in shown and "verdicts" in shown
    assert not shown.lstrip().startswith("{")
    doc = run_nodetune("runs", run, "--json", runs_dir=runs_dir).json()
    assert doc["run_id"] == run and doc["verb"] == "check"
    assert set(doc["nodes"]) == set(lab.nodes)
    for node, verdict in doc["nodes"].items():  # the record's verdicts, shown as words
        assert f"  {node}: {verdict['verdict']}" in shown, shown
