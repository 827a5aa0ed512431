"""Where nodetune's Ansible content (``playbooks/``, ``roles/``) lies.

Kept apart from :mod:`nodetune.ansible.runner` so that what only reads the roles' files
(their defaults, the probe's fact script: the node-local health check) does not import
the playbook runner.
"""

from __future__ import annotations

from pathlib import Path

from nodetune.errors import PlaybookError


def content_dir() -> Path:
    """Directory holding ``playbooks/`` and ``roles/`` (installed package or source tree)."""
    package = Path(__file__).resolve().parents[1]  # nodetune/
    for candidate in (package / "_content", package.parent):
        if (candidate / "playbooks" / "site.yml").is_file():
            return candidate
    raise PlaybookError(f"nodetune's playbooks are missing (looked in {package}/_content and "
                        f"{package.parent}); reinstall nodetune")
