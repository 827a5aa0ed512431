"""Start the selected molecule scenarios at collection (see tests/molecule/runs.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.molecule import runs


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly:
        return
    selected = [item.callspec.params["scenario"] for item in items
                if isinstance(item, pytest.Function) and item.originalname == "test_scenario"
                and item.nodeid.startswith("tests/molecule/")]
    if selected:
        runs.start(selected)


# A file touched when the first molecule test starts: the unit tests before it have ended,
# and scripts/test.sh starts the ansible-core 2.21 pass (its unit tests never run beside
# these ones; molecule's scenarios go on meanwhile).
UNIT_DONE_FILE_ENV = "NODETUNE_UNIT_DONE_FILE"


def pytest_runtest_setup(item: pytest.Item) -> None:
    done_file = os.environ.get(UNIT_DONE_FILE_ENV)
    if done_file and item.nodeid.startswith("tests/molecule/"):
        Path(done_file).touch()


def pytest_sessionfinish(session: pytest.Session) -> None:
    del session
    runs.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each scenario's wall time, as the suite's phase table wants it (scripts/test.sh)."""
    ended = runs.timings()
    if ended:
        terminalreporter.section(f"molecule scenarios ({runs.PARALLEL} at a time)")
        for name, code, took in ended:
            terminalreporter.write_line(f"{took:7.0f} s  {name}" + (f" (exit {code})" if code
                                                                    else ""))
