"""The name of the lab the test suite owns, claimed before anything imports nodetune.lab.nodes.

nodetune.lab.nodes reads NODETUNE_LAB once, at import. The suite sets it, for itself
and for every command it starts, to a name of its own: NODETUNE_TEST_LAB if
given, else the operator's lab name (NODETUNE_LAB, default nodetune-lab) with
``-test`` appended. A lab the operator runs (`scripts/demo.sh` leaves one) is
therefore never reused, resized or removed by the suite.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

LAB_ENV = "NODETUNE_LAB"  # nodetune.lab.nodes.LAB_ENV, not imported: that would fix the name
SUITE_ENV = "NODETUNE_TEST_LAB"
DEFAULT = "nodetune-lab"


def suite_lab_name(environ: MutableMapping[str, str]) -> str:
    """The suite's lab name for this environment (stable: claiming it twice changes nothing)."""
    return environ.get(SUITE_ENV) or f"{environ.get(LAB_ENV) or DEFAULT}-test"


def claim(environ: MutableMapping[str, str] = os.environ) -> str:
    """Point NODETUNE_LAB at the suite's own lab for this process and its children."""
    name = suite_lab_name(environ)
    environ[SUITE_ENV] = name
    environ[LAB_ENV] = name
    return name
