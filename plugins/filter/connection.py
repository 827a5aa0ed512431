"""Filter ``nodetune.cluster.connection_plugin``: a connection name in one spelling."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.connection import (
    connection_plugin,
)


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {"connection_plugin": connection_plugin}
