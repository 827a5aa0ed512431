"""Run records on disk: ``.nodetune/runs/<UTC time>-<verb>/report.json``."""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune import __version__
from nodetune.errors import InputError, RecordError
from nodetune.files import write_atomic

SCHEMA_VERSION = 1
RUNS_ENV = "NODETUNE_RUNS_DIR"
REPORT = "report.json"
# A runs folder that cannot take one more entry is infrastructure (exit 3), not bad input.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def runs_dir(root: Path | None = None) -> Path:
    """Where run records live: ``$NODETUNE_RUNS_DIR`` or ``<root or cwd>/.nodetune/runs``."""
    env = os.environ.get(RUNS_ENV)
    if env:
        return Path(env)
    return (root or Path.cwd()) / ".nodetune" / "runs"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run's directory on disk."""

    path: Path
    verb: str
    started: datetime

    @property
    def id(self) -> str:
        """The run's id: its directory name."""
        return self.path.name

    def document(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """``report`` under the record's header (schema, versions, verb, run id, start)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "nodetune_version": __version__,
            "verb": self.verb,
            "run_id": self.id,
            "started": self.started.isoformat(timespec="seconds"),
            # From the start to this write (the last); a verb that times its own run says so.
            "duration_s": round((datetime.now(UTC) - self.started).total_seconds(), 2),
            **report,
        }

    def write(self, report: Mapping[str, Any], *, files: Mapping[str, str] | None = None,
              copy_to: Path | None = None) -> Path:
        """Write ``files`` (a name under the run directory → text: the nodes' logs), the
        document to ``copy_to`` (``--report PATH``), then ``report.json``; return its path.

        Each file is written whole or not at all (a temp file and a rename), and
        report.json last: where it exists, the rest of the record was written.

        Raises:
            RecordError: a file cannot be written (a full disk); nothing half-written is
                left, and the error carries the document for ``--json``.
        """
        doc = self.document(report)
        text = json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n"
        target = self.path / REPORT
        writes = [*((self.path / name, content) for name, content in (files or {}).items()),
                  *([(copy_to, text)] if copy_to is not None else []), (target, text)]
        for path, content in writes:
            _put(path, content, doc)
        return target


def node_logs(logs: Mapping[str, Sequence[str]], folder: str = "") -> dict[str, str]:
    """Each node's log as a file of a run record: ``[folder/]<node>.log`` → its text."""
    prefix = f"{safe_name(folder)}/" if folder else ""
    return {f"{prefix}{safe_name(host)}.log": "\n".join(lines) + "\n"
            for host, lines in logs.items()}


def safe_name(name: str) -> str:
    """A file name from an inventory name: anything unusual becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "_"


def _put(path: Path, text: str, doc: dict[str, Any]) -> None:
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise RecordError(f"cannot write the run record: {path}: {exc.strerror or exc}",
                          document=doc) from None


def new_run(verb: str, *, root: Path | None = None) -> RunRecord:
    """Create a fresh run directory named after the UTC start time and the verb.

    Raises:
        InputError: the runs folder cannot be created or written (exit 2).
        RecordError: the disk under it is full (exit 3).
    """
    started = datetime.now(UTC)
    base = runs_dir(root)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    for n in range(100):
        suffix = "" if n == 0 else f"-{n}"
        path = base / f"{stamp}-{verb}{suffix}"
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        except OSError as exc:
            error = RecordError if exc.errno in DISK_FULL else InputError
            raise error(f"cannot create a run directory under {base}: "
                        f"{exc.strerror or exc}") from None
        return RunRecord(path=path, verb=verb, started=started)
    raise InputError(f"cannot create a run directory under {base}")


def _read(path: Path) -> dict[str, Any]:
    """The report of one run directory, or a stand-in naming what is wrong with it."""
    try:
        if path.is_symlink():
            raise ValueError("a symbolic link, not a run directory")
        doc = json.loads((path / REPORT).read_text())
    except FileNotFoundError:
        return {"run_id": path.name, "error": f"no {REPORT}"}
    except OSError as exc:
        return {"run_id": path.name, "error": f"{REPORT} unreadable ({exc.strerror or exc})"}
    except ValueError as exc:  # bad JSON, undecodable bytes, or the symlink above
        reason = str(exc) if path.is_symlink() else f"{REPORT} is not valid JSON"
        return {"run_id": path.name, "error": reason}
    if not isinstance(doc, dict):
        return {"run_id": path.name,
                "error": f"{REPORT} holds a JSON {type(doc).__name__}, not a run record"}
    return {"run_id": path.name, **doc}


def _run_dirs(base: Path) -> list[Path]:
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    dirs = []
    for p in entries:
        try:
            if p.is_dir() or p.is_symlink():
                dirs.append(p)
        except OSError:
            continue
    return sorted(dirs, key=lambda p: p.name)


def list_runs(*, root: Path | None = None) -> list[dict[str, Any]]:
    """Every run record, oldest first (run ids start with the UTC start time).

    Anything in the runs folder that is not a readable record (a stray file is
    skipped; a directory without report.json, garbage or non-object JSON, a
    symbolic link, an unreadable directory) is listed with an ``error``.
    """
    return [_read(p) for p in _run_dirs(runs_dir(root))]


def load_run(run_id: str, *, root: Path | None = None) -> dict[str, Any]:
    """The report of one run, by id or unique prefix.

    Raises:
        InputError: no run, or several, match ``run_id``, or its record is unreadable.
    """
    base = runs_dir(root)
    matches = [p for p in _run_dirs(base) if p.name.startswith(run_id)]
    exact = [p for p in matches if p.name == run_id]
    if exact:
        matches = exact
    if len(matches) != 1:
        what = "no run" if not matches else f"{len(matches)} runs"
        raise InputError(f"{what} under {base} match {run_id!r}; `nodetune runs` lists them")
    doc = _read(matches[0])
    if "error" in doc and set(doc) == {"run_id", "error"}:
        raise InputError(f"{matches[0]}: {doc['error']}")
    return doc


def find_run(run_id: str, *, root: Path | None = None) -> dict[str, Any] | None:
    """The report of the run named exactly ``run_id`` (no prefix match), or None.

    None also when the name is not a plain directory name or its record is unreadable.
    """
    if not run_id or run_id in (".", "..") or "/" in run_id or "\0" in run_id:
        return None
    path = runs_dir(root) / run_id
    try:
        if path.is_symlink() or not path.is_dir():
            return None
    except OSError:
        return None
    doc = _read(path)
    return None if "error" in doc and set(doc) == {"run_id", "error"} else doc
