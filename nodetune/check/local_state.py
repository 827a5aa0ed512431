"""What the node-local check keeps between its runs, in its state directory.

- ``versions.json``: torch's, CUDA's and NCCL's versions as ``nodetune_python`` reports
  them on importing torch. They change only with an apply or a reboot, so the health
  check imports torch once per boot, or again when a file they come from changed: the
  cache is kept while the boot id (``/proc/sys/kernel/random/boot_id``, Linux
  Documentation/admin-guide/sysctl/kernel.rst "random", read 2026-11-29) and the
  mtime and size of each such file (the Python, its site-packages directories, torch's
  ``version.py``, the NCCL/CUDA libraries the import loaded) are the same. A failed or
  timed-out import (an ``error``), or one that found none of those files, is never kept:
  the next run imports torch again, so a repaired node passes without a reboot.
- ``previous.json``: the previous check, where gpu.xid and the counted signals
  (:data:`nodetune.check.health.COUNTED`: fabric.rdma_errors, node.pcie_aer,
  gpu.nvlink_errors) count from, as ``check`` counts from its run history: what each of
  those kept (its keys of ``health[NODE]``, under the same keys), the point
  from which Xids count, and whether its failed gpu.xid left the node out of service.
  An Xid counts until a check finds the node back in service after a run that left it
  out of service for that Xid (an operator resumed it, after a GPU reset say): from then
  on Xids count from just after the newest one that run saw. So a drain for an Xid holds
  until someone resumes it, and a resumed node is not drained again for the same Xid; a
  new Xid fails again.

Both files are written atomically; one from another boot is ignored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune.check.health import COUNTED
from nodetune.check.node_probe import TORCH_SNIPPET
from nodetune.check.signal_read import Kept, Previous, as_number, kept_state
from nodetune.files import write_atomic
from nodetune.slurm.state import SlurmNode

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
VERSIONS = "versions.json"
PREVIOUS = "previous.json"
STATE_VERSION = 1
# torch's versions (TORCH_SNIPPET's line), then the files they come from.
_FILES_SNIPPET = TORCH_SNIPPET + r"""
files = []
try:
    import site
    files += list(site.getsitepackages()) + [site.getusersitepackages()]
except Exception:
    pass
try:
    import os
    import torch
    files.append(os.path.join(os.path.dirname(torch.__file__), "version.py"))
    with open("/proc/self/maps") as fh:
        for line in fh:
            words = line.split()
            if len(words) >= 6 and any(k in words[5] for k in ("libnccl", "libcudart")):
                files.append(words[5])
except Exception:
    pass
print(json.dumps({"files": sorted(set(files))}))
"""


def boot_id(path: Path = BOOT_ID) -> str:
    """This boot's id ("" where the kernel gives none: every run is then a new boot)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("version") == STATE_VERSION else {}


def _keep(torch: object, files: Mapping[str, Any]) -> bool:
    """Whether an answer may be kept for later runs: torch imported (no ``error``) and the
    files it came from were found. A failed import is read again next run, so that a
    repaired node passes without a reboot."""
    return isinstance(torch, dict) and "error" not in torch and bool(files)


class VersionCache:
    """torch's versions for :class:`nodetune.check.run.CheckOptions`'s ``torch_versions``:
    from ``versions.json`` while it holds, else read once (``python -c``) and kept.

    ``source`` says, after a call, where the answer came from ("cache" or "read") and when
    it was read.
    """

    def __init__(self, state_dir: Path, *, timeout: float, boot: str | None = None) -> None:
        self.path = state_dir / VERSIONS
        self.timeout = timeout
        self.boot = boot_id() if boot is None else boot
        self.source: dict[str, Any] = {}

    def __call__(self, python: str, env: Mapping[str, str]) -> dict[str, Any]:
        exe = shutil.which(python) or python
        key = {"boot_id": self.boot, "python": python, "env": dict(env)}
        doc = _load(self.path)
        raw = doc.get("files")
        files: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if self.boot and doc.get("key") == key and _keep(doc.get("torch"), {
                f: st for f, st in files.items() if f != exe}) and all(
                _stat(f) == st for f, st in files.items()):
            self.source = {"source": "cache", "read_at": doc.get("read_at"), "file": str(
                self.path)}
            return dict(doc["torch"])
        torch, found = self._read(python, env)
        now = time.time()
        stats = {f: _stat(f) for f in [exe, *found]}
        self.source = {"source": "read", "read_at": _stamp(now), "file": str(self.path)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not _keep(torch, {f: st for f, st in stats.items() if f != exe}):
            # A failed or timed-out import, or one that named no file: read again next run.
            self.path.unlink(missing_ok=True)
            self.source["kept"] = False
            return torch
        write_atomic(self.path, json.dumps({"version": STATE_VERSION, "key": key,
                                            "files": stats, "torch": torch,
                                            "read_at": _stamp(now)}) + "\n", mode=0o600)
        return torch

    def _read(self, python: str, env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
        """(the probe's torch fields, the files they came from); a failed import is the
        answer's ``error``, as the probe reports it."""
        try:
            proc = subprocess.run([python, "-c", _FILES_SNIPPET], capture_output=True,
                                  text=True, timeout=self.timeout, check=False,
                                  env={**os.environ, **env})
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": f"exit None: {str(exc)[:300]}"}, []
        docs = []
        for line in proc.stdout.splitlines():
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
        docs = [d for d in docs if isinstance(d, dict)]
        files: list[Any] = next((d["files"] for d in docs if isinstance(d.get("files"), list)),
                                [])
        torch = next((d for d in docs if "files" not in d), None)
        if proc.returncode != 0 or torch is None:
            return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}, []
        return torch, [str(f) for f in files if isinstance(f, str)]


@dataclass(frozen=True, slots=True)
class State:
    """The previous check of this node in this boot (empty: none)."""

    time: float | None = None
    xid_since: float | None = None   # Xids count from here
    xid_since_what: str = ""
    xid_last: float | None = None    # the newest Xid the previous check counted
    xid_held: bool = False           # its gpu.xid failed and the node was left out of service
    # What each counted signal kept, by its name: its keys of the check's health entry.
    kept: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def load(state_dir: Path, slurm_node: str, boot: str) -> State:
    """The previous check of ``slurm_node`` in boot ``boot`` (an empty State otherwise)."""
    doc = _load(state_dir / PREVIOUS)
    if not boot or doc.get("boot_id") != boot or doc.get("slurm_node") != slurm_node:
        return State()
    return State(time=as_number(doc.get("time")), xid_since=as_number(doc.get("xid_since")),
                 xid_since_what=str(doc.get("xid_since_what") or ""),
                 xid_last=as_number(doc.get("xid_last")), xid_held=doc.get("xid_held") is True,
                 kept={name: state for name, keys in COUNTED.items()
                       if (state := kept_state(keys, doc)) is not None})


def cleared(state: State, node: SlurmNode | None) -> State:
    """``state`` with the Xids of a held failure counted as cleared where the node is back
    in service (``node`` read before this check; None: unknown, nothing cleared)."""
    if not state.xid_held or state.xid_last is None or node is None or node.out_of_service:
        return state
    return replace(state, xid_since=state.xid_last + 1e-3, xid_last=None, xid_held=False,
                   xid_since_what=f"the Xid of {_stamp(state.xid_last)}, after which the "
                   "node was returned to service")


def previous(state: State) -> Previous:
    """Where this check counts from."""
    what = f"the previous health check ({_stamp(state.time)})" if state.time else ""
    return Previous(xid_since=state.xid_since, xid_what=state.xid_since_what,
                    kept={name: Kept(kept, state.time, what)
                          for name, kept in state.kept.items()},
                    time=state.time, what=what)


def save(state_dir: Path, slurm_node: str, boot: str, before: State,
         health: Mapping[str, Any], *, out_of_service: bool) -> None:
    """Record this check (its ``health`` entry) for the next one.

    Xids count from this check on where its gpu.xid passed or warned; a failed gpu.xid
    keeps the point, and is held (:func:`cleared`) where the node was left out of service.
    """
    if not health:
        return
    now = health.get("time")
    now = float(now) if isinstance(now, int | float) else time.time()
    status = health.get("xid")
    last = health.get("xid_last")
    doc: dict[str, Any] = {"version": STATE_VERSION, "slurm_node": slurm_node, "boot_id": boot,
                           "time": now,
                           **{key: health.get(key) for keys in COUNTED.values()
                              for key in keys},
                           "xid_since": before.xid_since,
                           "xid_since_what": before.xid_since_what,
                           "xid_last": last if isinstance(last, int | float) else None,
                           "xid_held": status == "fail" and out_of_service}
    if status in ("pass", "warn"):
        doc["xid_since"], doc["xid_since_what"] = now, f"the health check of {_stamp(now)}"
    write_atomic(state_dir / PREVIOUS, json.dumps(doc, indent=2) + "\n", mode=0o600)
