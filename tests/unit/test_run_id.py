"""A run's id: one rule (nodetune.remote.session.RUN_ID), one maker (new_run_id).

The id marks a run's processes (NODETUNE_RUN_ID, which the worker's reaper kills by), its
temp dir's run-id file (which the worker's sweep reads), its containers' names and its
Slurm job's comment. The worker (collective/worker/, shipped as one file) runs on nodes
without the package, so its reaper.py holds a copy of the pattern, and measure/protocol.py
one of the variable's name; this keeps each copy the same.
"""

from __future__ import annotations

import pytest

from nodetune.collective.worker import common, reaper
from nodetune.measure import protocol
from nodetune.remote.session import RUN_ID, RUN_VAR, new_run_id


@pytest.mark.parametrize(("text", "ok"), [
    ("0123456789abcdef0123456789abcdef", True),
    ("ffffffffffffffffffffffffffffffff", True),
    ("0123456789abcdef", False),                     # too short
    ("ab12cd34", False),
    ("0123456789abcdef0123456789abcdef0", False),    # too long
    ("0123456789ABCDEF0123456789ABCDEF", False),     # uuid4().hex is lower-case
    ("0123456789abcdef-0123456789abcde", False),
    ("0123456789abcdef0123456789abcdef\n", False),   # `$` would take a trailing newline
    ("", False),
    ("x; rm -rf / #0123456789abcdef012345", False),
])
def test_the_rule(text: str, ok: bool) -> None:
    assert bool(RUN_ID.match(text)) is ok  # as its readers ask it
    assert bool(reaper.RUN_ID.match(text)) is ok


def test_the_workers_copy_is_the_same_rule() -> None:
    assert reaper.RUN_ID.pattern == RUN_ID.pattern
    assert reaper.RUN_ID.flags == RUN_ID.flags


def test_the_protocols_copy_is_the_same_variable() -> None:
    assert protocol.RUN_VAR == common.RUN_VAR == RUN_VAR == "NODETUNE_RUN_ID"


def test_every_id_made_passes_the_rule() -> None:
    ids = {new_run_id() for _ in range(64)}
    assert len(ids) == 64
    assert all(RUN_ID.match(i) for i in ids)
