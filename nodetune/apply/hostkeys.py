"""``apply --accept-new-host-keys``: record the keys of hosts seen for the first time, as
``check`` and ``validate`` do, before Ansible's ssh connects to them.

nodetune's SSH layer connects once to each selected SSH host with
``StrictHostKeyChecking=accept-new``: a key not yet in known_hosts is recorded
in the first known_hosts file the host's ssh_config names (the file Ansible's
ssh reads), a changed key still fails. A host that cannot be reached is left to
Ansible, whose unreachable result :mod:`nodetune.apply.unreachable` explains.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from nodetune.ansible.inventory import Host
from nodetune.errors import NodetuneError
from nodetune.remote import ssh

log = logging.getLogger(__name__)

TIMEOUT = 10.0


def accept_new(hosts: Sequence[Host], *, timeout: float = TIMEOUT) -> dict[str, str]:
    """Connect to each SSH host of ``hosts`` accepting a new key; the hosts that failed, with
    the reason (they are not refused here: the playbook run reports them)."""
    reachable = [h for h in hosts if h.connection in ssh.SSH_CONNECTIONS]
    if not reachable:
        return {}

    def one(host: Host) -> str | None:
        try:
            ssh.connect(host, accept_new_host_keys=True, timeout=timeout).close()
        except NodetuneError as exc:
            log.debug("%s: host key not recorded: %s", host.name, exc.message)
            return exc.message
        return None

    with ThreadPoolExecutor(max_workers=min(16, len(reachable))) as pool:
        results = list(pool.map(one, reachable))
    return {h.name: why for h, why in zip(reachable, results, strict=True) if why}
