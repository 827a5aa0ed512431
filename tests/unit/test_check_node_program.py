"""How the control side reads a node program's answer (:mod:`nodetune.check.node_program`):
the last stdout line that starts with ``{``, if it is a JSON object."""

from __future__ import annotations

import pytest

from nodetune.check import node_program


@pytest.mark.parametrize(("stdout", "doc"), [
    # several lines: the last one that starts with "{" wins, whatever follows it
    ('{"a": 1}\nnoise\n{"probe": 1, "x": [1]}\ntrailing words\n', {"probe": 1, "x": [1]}),
    ("warning: {not at the start}\n  {indented}\n", None),  # no line starts with "{"
    ("", None),
    ('{"a": 1}\n{"truncated": \n', None),  # the last object line is malformed: no answer
    ('{"a": 1}\n{broken\n', None),
    ("[1, 2]\n", None),  # JSON, but not an object: a "{" line parses only to an object
    ('{"a": 1}\n"text"\n7\n', {"a": 1}),  # later JSON non-objects are not answers
    ('{"a": 1}\n{} \n', {}),
])
def test_last_object(stdout: str, doc: dict[str, object] | None) -> None:
    assert node_program.last_object(stdout) == doc
