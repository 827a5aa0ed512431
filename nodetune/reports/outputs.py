"""Report files a verb writes on request (``--junit``, ``--prom-textfile``), checked first."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodetune.errors import InputError
from nodetune.reports import html, model


@dataclass(frozen=True, slots=True)
class Requested:
    """The report files an operator asked for besides the run record (already checked)."""

    junit: Path | None = None
    prom_textfile: Path | None = None


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`finish` wrote, and one line per file it could not write."""

    paths: tuple[Path, ...]
    problems: tuple[str, ...]


def check_writable(path: Path | None, option: str) -> None:
    """Refuse, before anything runs, an output path that cannot be written.

    Raises:
        InputError: the path is a directory, or its folder is missing or not writable.
    """
    if path is None:
        return
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: folder {parent} is not writable")


def has_results(doc: Mapping[str, Any]) -> bool:
    """Whether the record judged or measured anything: a node verdict, a pair or a check."""
    return bool(model.nodes_of(doc) or model.pairs_of(doc) or model.checks_of(doc))


def finish(run_dir: Path, doc: Mapping[str, Any], requested: Requested | None = None) -> Written:
    """Write the files a run leaves besides ``report.json``; never raise for one of them.

    ``report.html`` goes into ``run_dir`` on every ending. The JUnit file is
    written on every ending too (a run that ended before judging any node is
    one errored testcase saying why, so a CI gate fails instead of finding no
    file); the Prometheus textfile only when the record has results, so that
    a run that measured nothing does not replace the last measured series
    with none. A file that cannot be written is a problem line, not an error:
    it must not change the run's exit code.
    """
    paths: list[Path] = []
    problems: list[str] = []
    jobs: list[tuple[str, Path, Callable[[Path, Mapping[str, Any]], Path]]] = [
        ("report.html in", run_dir, html.write)]
    # JUnit and Prometheus only when asked: prometheus_client alone took 0.09 s of every
    # command's start.
    if requested is not None and requested.junit is not None:
        from nodetune.reports import junit

        jobs.append(("--junit", requested.junit, junit.write))
    if requested is not None and requested.prom_textfile is not None and has_results(doc):
        from nodetune.reports import prom

        jobs.append(("--prom-textfile", requested.prom_textfile, prom.write))
    for what, target, write in jobs:
        try:
            paths.append(write(target, doc))
        except Exception as exc:  # a report file must never decide the run's exit code
            problems.append(f"{what} {target} not written: {type(exc).__name__}: {exc}")
    return Written(paths=tuple(paths), problems=tuple(problems))
