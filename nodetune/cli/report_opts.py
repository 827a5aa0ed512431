"""--junit/--prom-textfile (check, validate) and --max-regression/--fail-on-regression (validate).

The paths are checked when the verb starts, before anything contacts a node
(exit 2 naming the option); :class:`~nodetune.cli.common.RecordedVerb` writes
the files from the final record, whatever ends the run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape

from nodetune.cli.common import OUTPUTS
from nodetune.cli.console import err_console
from nodetune.reports import history, outputs

F = TypeVar("F", bound=Callable[..., Any])

REGRESSION = "nodetune.regression"  # ctx.meta key: the run's RegressionPolicy

HELP = """\b
Reports: every run leaves report.json and report.html (plots, bad nodes
first; one file, no scripts, nothing fetched) in .nodetune/runs/<id>/;
`nodetune runs ID --open` prints the page's path.
  --junit FILE          JUnit XML (Ant's schema, read by Jenkins and GitLab):
                        one testcase per node and per check or pair; a bad
                        node fails, an unreachable/unresolved one errors
  --prom-textfile FILE  metrics for node_exporter's textfile collector,
                        written atomically: nodetune_node_healthy{node},
                        nodetune_validate_busbw_gbps{node,peer,bytes},
                        nodetune_check_status{node,check},
                        nodetune_last_run_timestamp_seconds
Both paths are checked before any node is contacted (exit 2 if the folder is
missing or not writable). The JUnit file is written on every ending (a run
that judged no node is one errored testcase); the metrics whenever the run
has results (nodes, pairs or checks).
"""

REGRESSION_HELP = """\b
History: each node's busbw at the largest size is compared with the median
of its last 5 passing validate runs on the same profile and sizes, read from
the run records under .nodetune/runs (no other store). A drop of more than
--max-regression percent is a warning on stderr, in report.json's
"regressions", report.html and JUnit; --fail-on-regression makes it a
failure (exit 1). `nodetune runs --node NAME` lists a node's history.
"""


def report_options(fn: F) -> F:
    """Add --junit and --prom-textfile; check both paths before the verb's body runs."""

    @functools.wraps(fn)
    def wrapper(*args: Any, junit: Path | None, prom_textfile: Path | None,
                **kwargs: Any) -> Any:
        outputs.check_writable(junit, "--junit")
        outputs.check_writable(prom_textfile, "--prom-textfile")
        click.get_current_context().meta[OUTPUTS] = outputs.Requested(
            junit=junit.absolute() if junit else None,
            prom_textfile=prom_textfile.absolute() if prom_textfile else None)
        return fn(*args, **kwargs)

    for decorator in reversed([
        click.option("--junit", type=click.Path(path_type=Path, dir_okay=False),
                     metavar="FILE",
                     help="Write JUnit XML here: a testcase per node and per check/pair."),
        click.option("--prom-textfile", type=click.Path(path_type=Path, dir_okay=False),
                     metavar="FILE",
                     help="Write Prometheus metrics here (node_exporter textfile, *.prom)."),
    ]):
        wrapper = decorator(wrapper)
    return wrapper  # type: ignore[return-value]


def regression_options(fn: F) -> F:
    """Add --max-regression and --fail-on-regression (the policy goes into ctx.meta)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, max_regression: float, fail_on_regression: bool,
                **kwargs: Any) -> Any:
        click.get_current_context().meta[REGRESSION] = history.RegressionPolicy(
            max_regression=max_regression / 100.0, fail=fail_on_regression)
        return fn(*args, **kwargs)

    for decorator in reversed([
        click.option("--max-regression", type=click.FloatRange(0, 100), metavar="PCT",
                     default=history.DEFAULT_MAX_REGRESSION * 100, show_default=True,
                     help="Warn when a node's busbw at the largest size is more than PCT % "
                          "below the median of its last 5 passing runs (same profile)."),
        click.option("--fail-on-regression", is_flag=True,
                     help="A node slower than --max-regression allows fails the run (exit 1)."),
    ]):
        wrapper = decorator(wrapper)
    return wrapper  # type: ignore[return-value]


def regression_policy() -> history.RegressionPolicy | None:
    """The policy --max-regression/--fail-on-regression set for this run."""
    ctx = click.get_current_context(silent=True)
    policy = ctx.meta.get(REGRESSION) if ctx is not None else None
    return policy if isinstance(policy, history.RegressionPolicy) else None


def show_regressions(doc: dict[str, Any]) -> None:
    """Each regression the history comparison found, on stderr."""
    what = ("[bold red]regression:[/]" if doc.get("fail_on_regression")
            else "[yellow]warning:[/] regression:")
    for reg in doc.get("regressions") or []:
        err_console.print(f"{what} {escape(str(reg['message']))}")
