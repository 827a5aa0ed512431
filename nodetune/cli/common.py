"""What every verb shares: errors → exit codes and run records (the output streams, tables
and logging: :mod:`nodetune.cli.console`).

A recorded verb (:class:`RecordedVerb`) leaves ``report.json`` and ``report.html``
under the runs folder (and the ``--junit``/``--prom-textfile`` files asked for)
and, under ``--json``, prints the record on stdout, whatever ends it: a normal
end, bad input (exit 2, click's usage errors included), an error, a timeout,
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, ParamSpec, TypeVar

import click
from rich.markup import escape

from nodetune import records
from nodetune.cli.console import err_console
from nodetune.errors import ExitCode, NodetuneError, RecordError
from nodetune.reports import outputs

P = ParamSpec("P")
R = TypeVar("R")

INTERRUPTED = 130  # the shell's status for a process ended by SIGINT
TERMINATED = 143   # ... and by SIGTERM


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn nodetune errors into one clear line on stderr and the verb's exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except NodetuneError as exc:
            print_error(exc)
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            sys.exit(INTERRUPTED)

    return wrapper


def print_error(exc: NodetuneError) -> None:
    """One line on stderr naming the host (if any) and what to do."""
    err_console.print("[bold red]error:[/] " + escape(str(exc)))


def print_json(doc: Any) -> None:
    """Write a document to stdout as JSON."""
    click.echo(json.dumps(doc, indent=2, default=str))


class _Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so that every cleanup path runs."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise _Terminated


def record(ctx: click.Context) -> records.RunRecord:
    """The run record a :class:`RecordedVerb` opened for this invocation."""
    rec: records.RunRecord = ctx.meta["nodetune.record"]
    return rec


OUTPUTS = "nodetune.outputs"  # ctx.meta key: the checked --junit/--prom-textfile paths


def _report_files(rec: records.RunRecord, text: str) -> None:
    """report.html beside report.json, and the files asked for; a failure only warns."""
    ctx = click.get_current_context(silent=True)
    requested = ctx.meta.get(OUTPUTS) if ctx is not None else None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        err_console.print(f"[yellow]warning:[/] no report.html: {escape(str(exc))}")
        return
    written = outputs.finish(rec.path, doc, requested)
    for problem in written.problems:
        err_console.print(f"[yellow]warning:[/] {escape(problem)}")


class RecordedVerb(click.Command):
    """A verb that leaves a run record, and under ``--json`` a JSON document, on every exit.

    The callback writes the record of a run that ended on its own terms and
    ends with ``SystemExit(code)``; anything else that ends it is recorded here.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        argv = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:  # usage errors: exit 2 before the callback
            doc = {"status": "error", "exit_code": int(ExitCode.BAD_INPUT), "argv": argv,
                   "error": {"type": "UsageError", "host": None,
                             "message": exc.format_message()}}
            if self._leave(None, doc, as_json="--json" in argv):
                exc.show()  # as click would, with the record's exit status instead
                sys.exit(int(ExitCode.INFRASTRUCTURE))
            raise

    def invoke(self, ctx: click.Context) -> Any:
        as_json = bool(ctx.params.get("as_json"))
        base = {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()
                if k in ("inventory", "limit")}
        previous = signal.getsignal(signal.SIGTERM)
        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread (tests): no SIGTERM translation
            previous = None
        rec: records.RunRecord | None = None
        try:
            rec = records.new_run(str(self.name))
            ctx.meta["nodetune.record"] = rec
            super().invoke(ctx)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except NodetuneError as exc:
            code = int(exc.exit_code)
            error: dict[str, Any] = {"type": type(exc).__name__, "host": exc.host,
                                     "message": exc.message}
            done = base
            if isinstance(exc, RecordError) and exc.document:
                # A record that could not be written is still the run's document; an
                # error it held is kept as the one the run had first.
                done = exc.document
                if isinstance(done.get("error"), dict):
                    error["previous"] = done["error"]
                    print_error(NodetuneError(str(done["error"].get("message")),
                                              host=done["error"].get("host")))
            print_error(exc)
            code = self._leave(rec, {**done, "status": "error", "exit_code": code,
                                     "error": error}, as_json=as_json) or code
            sys.exit(code)
        except KeyboardInterrupt as exc:
            code = TERMINATED if isinstance(exc, _Terminated) else INTERRUPTED
            what = "terminated" if code == TERMINATED else "interrupted"
            self._leave(rec, {**base, "status": what, "exit_code": code,
                              "error": {"type": what, "host": None,
                                        "message": f"{what} by the operator"}},
                        as_json=as_json)
            err_console.print(f"[bold red]{what}[/]")
            sys.exit(code)
        except Exception as exc:
            self._leave(rec, {**base, "status": "error", "exit_code": 1,
                              "error": {"type": type(exc).__name__, "host": None,
                                        "message": f"internal error: {exc}"}}, as_json=as_json)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        code = self._leave(rec, {**base, "status": "ended", "exit_code": code},
                           as_json=as_json) or code
        sys.exit(code)

    def _leave(self, rec: records.RunRecord | None, doc: dict[str, Any], *,
               as_json: bool) -> int | None:
        """Write ``doc`` unless the verb already wrote its own record; print it under --json.

        Returns 3 when the record cannot be written (a full disk under the runs
        folder): nothing half-written is left, the error is printed, and the
        document printed under --json says so (an interrupted run keeps its code).
        """
        code = None
        try:
            if rec is None:
                rec = records.new_run(str(self.name))
            path = rec.path / records.REPORT
            if not path.is_file():
                rec.write(doc)
            text = path.read_text()
        except (NodetuneError, OSError) as exc:
            error = doc.get("error")
            if not (isinstance(error, dict) and error.get("type") == RecordError.__name__):
                message = exc.message if isinstance(exc, NodetuneError) else (
                    f"cannot read the run record: {exc}")
                print_error(RecordError(message))
                if doc.get("exit_code") not in (INTERRUPTED, TERMINATED):
                    code = int(ExitCode.INFRASTRUCTURE)
                    doc = {**doc, "status": "error", "exit_code": code, "error": {
                        "type": RecordError.__name__, "host": None, "message": message,
                        **({"previous": error} if isinstance(error, dict) else {})}}
            full = rec.document(doc) if rec is not None else {
                "schema_version": records.SCHEMA_VERSION, "verb": self.name, **doc}
            text = json.dumps(full, indent=2, default=str) + "\n"
        else:
            _report_files(rec, text)
        if as_json:
            click.echo(text, nl=False)
        return code


def global_verbosity(ctx: click.Context) -> int:
    """nodetune's own -v (given before the verb), which apply and facts add to theirs."""
    parent = ctx.find_root()
    return int(parent.params.get("verbose") or 0)
