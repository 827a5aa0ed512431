"""Per-node health checks (`nodetune check`): GPUs, software alignment, fabric drift.

The API other verbs use::

    from nodetune.check import CheckOptions, check_nodes, node_verdicts
"""

from nodetune.check.model import CheckResult, NodeChecks, Status
from nodetune.check.run import (
    CheckOptions,
    check_nodes,
    exit_code,
    node_verdicts,
    report_sections,
)

__all__ = ["CheckOptions", "CheckResult", "NodeChecks", "Status", "check_nodes", "exit_code",
           "node_verdicts", "report_sections"]
