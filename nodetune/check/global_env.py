"""``node.global_env``: ``NCCL_*``/``CUDA_*`` variables set host-wide, which override what
provisioning wrote.

NCCL reads ``/etc/nccl.conf`` (the nccl_config role's file) only for variables the
environment does not set: "the environment overrides both" (roles/nccl_config/defaults,
from NCCL's "Environment Variables" documentation; the h200-x1 capture shows NCCL_BUFFSIZE
from the environment winning over the file's value). A value set for every login or
service therefore wins silently over provisioning. Read host-wide (node_host.py, read
2026-11-29):

- ``/etc/environment``: pam_env's file of simple ``KEY=VAL`` pairs on separate lines, read
  for every PAM session (pam_env(8), https://man.archlinux.org/man/pam_env.8.en.txt);
- ``/etc/profile.d/*.sh``: sourced by login shells; ``NAME=value`` and ``export
  NAME=value`` lines are read as text, never run;
- the systemd manager environment, passed to every service it starts (slurmd and its jobs
  among them): ``systemctl show-environment`` prints ``VARIABLE=value``, or
  ``VARIABLE=$'value'`` where the value holds whitespace or shell characters (systemctl(1),
  https://www.freedesktop.org/software/systemd/man/latest/systemctl.html).

A host-wide NCCL value that differs from ``/etc/nccl.conf`` or from the inventory's
nccl_config settings fails, naming the variable, its value, where it is set and what was
provisioned; any other host-wide NCCL_/CUDA_ value warns (listed); none passes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.check.expect import Expectations
from nodetune.check.fabric import _nccl_file
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult, HelpLines, failed, passed, warned
from nodetune.check.probe_parse import Probe, count, printable

NAME = "node.global_env"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("node.global_env",
     "NCCL_*/CUDA_* set host-wide (/etc/environment, /etc/profile.d/*.sh, the",
     "systemd manager environment): an NCCL value that differs from",
     "/etc/nccl.conf or the inventory's nccl_config fails (the environment wins",
     "over nccl.conf); any other warns"),
)
SHOWN = 5  # assignments named in the measured value at most
_ENV_NAME = re.compile(r"^(?:NCCL|CUDA)_[A-Za-z0-9_]{1,120}$")


def section(probe: Probe) -> dict[str, Any]:
    """node_host.global_env's answer (the probe's ``global_env``) with every name a plain
    NCCL_/CUDA_ name and every value short and printable (the node's files are not
    trusted)."""
    doc = probe.section("global_env")
    entries = []
    for e in doc.get("entries") or []:
        if not isinstance(e, dict) or not _ENV_NAME.match(str(e.get("name", ""))):
            continue
        line = e.get("line")
        entries.append({"name": str(e["name"]), "value": printable(e.get("value", ""), 256),
                        "file": printable(e.get("file", ""), 200),
                        "line": line if isinstance(line, int) else None,
                        "truncated": e.get("truncated") is True,
                        "dynamic": e.get("dynamic") is True})
    manager = doc.get("manager")
    manager = manager if isinstance(manager, dict) else {}
    return {"entries": entries[:100], "more": count(doc.get("more")),
            "scripts_skipped": count(doc.get("scripts_skipped")),
            "manager": {"tool": printable(manager["tool"], 300) if manager.get("tool")
                        else None, "rc": manager.get("rc"),
                        "error": printable(manager.get("error") or "", 300)}}


def judge_probe(probe: Probe, exp: Expectations, gpus: GpuRead) -> list[CheckResult]:
    """The host-wide environment, as the probe read it, against its NCCL config and the
    inventory."""
    return [judge(section(probe), probe.nccl_conf, exp)]


def _where(entry: Mapping[str, Any]) -> str:
    line = entry.get("line")
    return f"{entry.get('file')}:{line}" if line is not None else str(entry.get("file"))


def _text(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value).strip()


def provisioned(nccl_conf: Mapping[str, Any] | None, exp: Expectations
                ) -> dict[str, list[tuple[str, str]]]:
    """NCCL key -> [(where, value)]: the node's NCCL config file and the inventory's
    nccl_config settings (what apply writes there)."""
    out: dict[str, list[tuple[str, str]]] = {}
    path = str((nccl_conf or {}).get("path") or exp.nccl_path)
    for key, value in _nccl_file(str((nccl_conf or {}).get("content") or "")).items():
        out.setdefault(key.strip(), []).append((path, value.strip()))
    for key, var in exp.nccl_settings.items():
        out.setdefault(key, []).append((var.source, _text(var.value)))
    return out


def _no_manager(error: str) -> bool:
    """Whether systemctl said no systemd runs as PID 1 (a container, a chroot): then there
    is no manager environment to override anything, rather than one left unread."""
    return ("not been booted with systemd" in error
            or error.startswith("Failed to connect to bus"))


def _contradiction(entry: Mapping[str, Any], wanted: Sequence[tuple[str, str]]) -> str | None:
    """Why ``entry`` overrides what was provisioned (None: it agrees, or nothing was)."""
    value = str(entry.get("value", ""))
    differ = [(where, v) for where, v in wanted if v != value]
    if not differ:
        return None
    dynamic = " (computed when the script runs)" if entry.get("dynamic") else ""
    cut = " (cut)" if entry.get("truncated") else ""
    what = ", ".join(f"{entry['name']}={v} in {where}" for where, v in differ)
    return (f"{entry['name']}={value}{cut}{dynamic} set host-wide in {_where(entry)} "
            f"contradicts {what}")


def judge(ge: Mapping[str, Any], nccl_conf: Mapping[str, Any] | None,
          exp: Expectations) -> CheckResult:
    """Host-wide NCCL_/CUDA_ assignments against the NCCL config file and the inventory."""
    entries = [e for e in ge.get("entries") or [] if isinstance(e, Mapping)]
    wanted = provisioned(nccl_conf, exp)
    path = str((nccl_conf or {}).get("path") or exp.nccl_path)
    source = f"{path} and nccl_config settings; pam_env(8), systemctl(1) show-environment"
    expected = f"no host-wide NCCL_*/CUDA_* that overrides {path} or the inventory"
    manager = ge.get("manager") or {}
    unread = (f"; the systemd manager environment was not read ({manager.get('error')})"
              if manager.get("tool") and manager.get("rc") != 0
              and not _no_manager(str(manager.get("error") or "")) else "")
    skipped = ge.get("scripts_skipped") or 0
    unread += f"; {skipped} /etc/profile.d script(s) not read" if skipped else ""
    if not entries and unread:  # what could not be read is not known to be clean
        return warned(NAME, "none found in what could be read", expected, source,
                      "not assessed in full: " + unread.lstrip("; "))
    if not entries:
        return passed(NAME, "none set host-wide", expected, source)
    shown = [f"{e['name']}={e.get('value', '')} ({_where(e)})" for e in entries[:SHOWN]]
    more = len(entries) - SHOWN + int(ge.get("more") or 0)
    measured = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    differ = [(e, c) for e in entries if str(e.get("name", "")).startswith("NCCL_")
              and (c := _contradiction(e, wanted.get(str(e["name"]), [])))]
    # a value a script computes when it runs is not known here: it may differ, not proven
    clashes = [c for e, c in differ if not e.get("dynamic")]
    unknown = [c for e, c in differ if e.get("dynamic")]
    unread += (f"; may differ, computed when the script runs: {'; '.join(unknown)}"
               if unknown else "")
    if clashes:
        return failed(NAME, measured, expected, source,
                      "; ".join(clashes) + ": NCCL takes the environment over its config "
                      "file, so what was provisioned is silently lost; remove the host-wide "
                      "setting (or provision that value through nccl_config)" + unread)
    names = sorted({str(e["name"]) for e in entries})
    return warned(NAME, measured, expected, source,
                  f"set host-wide, for every login or service: {', '.join(names)}; each would "
                  "silently win over nccl_config should it set the same variable; keep "
                  "NCCL_* in nccl_config and CUDA_* in the jobs' environment" + unread)
