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
