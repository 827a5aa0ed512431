"""Start the selected molecule scenarios at collection (see tests/molecule/runs.py)."""

from __future__ import annotations

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
