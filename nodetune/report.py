"""Run records on disk (``.nodetune/runs/<UTC time>-<verb>/report.json``) and text tables."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune import __version__
from nodetune.errors import InputError

SCHEMA_VERSION = 1
RUNS_ENV = "NODETUNE_RUNS_DIR"


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

    def write(self, report: dict[str, Any]) -> Path:
        """Write ``report.json`` with the schema header; return its path."""
        doc = {
            "schema_version": SCHEMA_VERSION,
            "nodetune_version": __version__,
            "verb": self.verb,
            "run_id": self.id,
            "started": self.started.isoformat(timespec="seconds"),
            **report,
        }
        target = self.path / "report.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
        tmp.replace(target)
        return target


def new_run(verb: str, *, root: Path | None = None) -> RunRecord:
    """Create a fresh run directory named after the UTC start time and the verb."""
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
        return RunRecord(path=path, verb=verb, started=started)
    raise InputError(f"cannot create a run directory under {base}")


def list_runs(*, root: Path | None = None) -> list[dict[str, Any]]:
    """Every readable run record, oldest first (unreadable ones are listed with an error)."""
    base = runs_dir(root)
    if not base.is_dir():
        return []
    runs = []
    for path in sorted(p for p in base.iterdir() if p.is_dir()):
        try:
            doc = json.loads((path / "report.json").read_text())
        except (OSError, ValueError) as exc:
            doc = {"run_id": path.name,
                   "error": f"no readable report.json ({exc.__class__.__name__})"}
        runs.append(doc)
    return runs


def load_run(run_id: str, *, root: Path | None = None) -> dict[str, Any]:
    """The report of one run, by id or unique prefix.

    Raises:
        InputError: no run, or several, match ``run_id``.
    """
    base = runs_dir(root)
    matches = [p for p in base.glob(f"{run_id}*") if p.is_dir()] if base.is_dir() else []
    if len(matches) != 1:
        what = "no run" if not matches else f"{len(matches)} runs"
        raise InputError(f"{what} under {base} match {run_id!r}; `nodetune runs` lists them")
    try:
        doc: dict[str, Any] = json.loads((matches[0] / "report.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{matches[0]}/report.json is unreadable: {exc}") from None
    return doc


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                 align: str | None = None) -> str:
    """Render an aligned plain-text table.

    Args:
        headers: column titles.
        rows: cells, converted with ``str``.
        align: one character per column, ``l`` or ``r``; numbers right-aligned by default.
    """
    cells = [[_cell(v) for v in row] for row in rows]
    if align is None:
        align = "".join(
            "r" if rows and all(isinstance(r[i], int | float) for r in rows) else "l"
            for i in range(len(headers))
        )
    widths = [
        max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        out = [
            v.rjust(w) if a == "r" else v.ljust(w)
            for v, w, a in zip(values, widths, align, strict=True)
        ]
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), sep, *(line(r) for r in cells)])


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if value is None:
        return "-"
    return str(value)
