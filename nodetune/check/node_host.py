"""What the node probe reads about the host's clock and its host-wide environment: stdlib
only, Python >= 3.8. :func:`nodetune.check.probe.source` puts this file's text into the
probe, which runs it as a namespace (``HOST``); nothing here writes or runs a script.

- time sync (judged by :mod:`nodetune.check.timesync`): ``chronyc -n -c tracking``
  (``chronyc -n tracking`` where an old chronyc refuses ``-c``; ``-n``: no DNS); else
  ``timedatectl show`` and ``timedatectl timesync-status``. Each runs under the probe's
  runner with a timeout of at most :data:`TOOL_TIMEOUT`; their output goes back as text,
  capped.
- host-wide ``NCCL_*``/``CUDA_*`` variables (judged by :mod:`nodetune.check.global_env`):
  ``/etc/environment`` (pam_env's ``KEY=VAL`` lines) and ``/etc/profile.d/*.sh`` read as
  lines, never run: ``NAME=value`` and ``export NAME=value``, a name checked against
  :data:`ASSIGN`, a value cut at :data:`VALUE_LIMIT` characters with control characters
  replaced; and ``systemctl show-environment`` (``NAME=value`` or ``NAME=$'value'``).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

TOOL_TIMEOUT = 5.0   # seconds for each of chronyc, timedatectl, systemctl
OUT_LIMIT = 4000     # characters of a tool's output kept
ASSIGN = re.compile(r"^(?:export[ \t]+)?((?:NCCL|CUDA)_[A-Za-z0-9_]{1,120})=(.*)$")
FILE_LIMIT = 65536   # bytes read of one file
VALUE_LIMIT = 256    # characters kept of one value
MAX_SCRIPTS = 64     # /etc/profile.d scripts read at most
MAX_ENTRIES = 100    # host-wide NCCL_/CUDA_ assignments kept at most
SCRIPT_WORD = re.compile(r"^(?:then|do|else)[ \t]+")
SCRIPT = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}\.sh$")


def _capped(res: dict[str, Any]) -> dict[str, Any]:
    out = {"rc": res.get("rc"), "stdout": str(res.get("stdout", ""))[:OUT_LIMIT],
           "stderr": str(res.get("stderr", ""))[-500:]}
    if res.get("unknown"):  # the tool hung (its group killed), crashed or could not start
        out["unknown"] = str(res["unknown"])[:300]
    return out


def time_sync(run: Callable[[list[str], float], dict[str, Any]], timeout: float) -> dict[str, Any]:
    """chrony's tracking report, else timedatectl's view; ``run`` is the probe's runner
    (argv, timeout) -> {rc, stdout, stderr}. A tool not on PATH is None."""
    limit = min(timeout, TOOL_TIMEOUT)
    chronyc, timedatectl = shutil.which("chronyc"), shutil.which("timedatectl")
    out: dict[str, Any] = {"chronyc": chronyc, "timedatectl": timedatectl}
    if chronyc:
        # -n: addresses, not names (a reverse DNS lookup of the source could hang on a
        # cluster without DNS; chronyc(1))
        res = run([chronyc, "-n", "-c", "tracking"], limit)
        # chronyc prints "506 Cannot talk to daemon" when chronyd does not answer; the text
        # form is asked only where the CSV form was refused (an old chronyc), not after a
        # timeout or an unreachable daemon
        said = f"{res.get('stdout', '')} {res.get('stderr', '')}"
        if res.get("rc") not in (0, None) and "506" not in said:
            out["chrony_text"] = _capped(run([chronyc, "-n", "tracking"], limit))
        out["chrony"] = _capped(res)
        if res.get("rc") == 0 or (out.get("chrony_text") or {}).get("rc") == 0:
            return out
    if timedatectl:
        out["show"] = _capped(run([timedatectl, "show"], limit))
        if out["show"]["rc"] == 0:  # else no bus to ask (no systemd as PID 1)
            out["timesync"] = _capped(run([timedatectl, "timesync-status"], limit))
    return out


def _clean(value: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in value[:VALUE_LIMIT])


def _value(raw: str, script: bool) -> dict[str, Any]:
    """One assignment's value as the reader of that file would see it, without expanding
    anything: quotes removed; in a script, an unquoted word ends at a blank or ``;``."""
    text = raw.strip()
    quoted = re.match(r"^(\$?'|\")(.*?)(?<!\\)(['\"])", text)
    if quoted and quoted.group(3) == quoted.group(1)[-1]:
        value = quoted.group(2)
    elif script:
        value = re.split(r"[ \t;&|#]", text, maxsplit=1)[0]
    else:
        value = text
    dynamic = script and ("$" in value or "`" in value) and not text.startswith("'")
    return {"value": _clean(value), "truncated": len(value) > VALUE_LIMIT,
            "dynamic": dynamic}


def assignments(text: str, where: str, *, script: bool) -> list[dict[str, Any]]:
    """The NCCL_/CUDA_ assignments among ``text``'s lines, each with its file and line."""
    found = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()[:VALUE_LIMIT * 4]
        # a script may hold several commands on a line: "if ...; then export A=1; fi"
        for part in re.split(r"[;&|]\s*", line) if script else [line]:
            m = ASSIGN.match(SCRIPT_WORD.sub("", part.strip()) if script else part)
            if m:
                found.append({"name": m.group(1), "file": where, "line": number,
                              **_value(m.group(2), script)})
    return found


def _read_file(path: str) -> str | None:
    """A regular file's first :data:`FILE_LIMIT` bytes (a FIFO or device is not opened)."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            return fh.read(FILE_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None


def global_env(root: str, run: Callable[[list[str], float], dict[str, Any]],
               timeout: float) -> dict[str, Any]:
    """Host-wide NCCL_/CUDA_ assignments: files under ``root``, then systemd's manager."""
    entries: list[dict[str, Any]] = []
    skipped = 0
    text = _read_file(root + "/etc/environment")
    if text is not None:
        entries += assignments(text, "/etc/environment", script=False)
    scripts = sorted(glob.glob(root + "/etc/profile.d/*.sh"))
    for path in scripts[:MAX_SCRIPTS]:
        name = os.path.basename(path)
        text = _read_file(path) if SCRIPT.match(name) else None
        if text is None:
            skipped += 1
            continue
        entries += assignments(text, "/etc/profile.d/" + name, script=True)
    systemctl = shutil.which("systemctl")
    manager: dict[str, Any] = {"tool": systemctl}
    if systemctl:
        res = run([systemctl, "show-environment"], min(timeout, TOOL_TIMEOUT))
        manager["rc"] = res.get("rc")
        if res.get("rc") == 0:
            entries += assignments(str(res.get("stdout", ""))[:FILE_LIMIT],
                                   "systemd manager environment", script=False)
        else:
            manager["error"] = _clean(str(res.get("stderr") or res.get("stdout") or ""))
    return {"entries": entries[:MAX_ENTRIES], "more": max(0, len(entries) - MAX_ENTRIES),
            "scripts_skipped": skipped + max(0, len(scripts) - MAX_SCRIPTS),
            "manager": manager}
