"""Why Ansible could not reach a host, said the way ``validate`` says it.

Ansible's ssh runs under a ControlMaster, and when a ProxyJump hop fails (its
host key unknown or changed) the ssh that proxies to it prints the reason
where no one reads it: the task says only "Connection closed by remote host".
nodetune's own SSH layer (the one validate uses: the same inventory variables,
ssh arguments and ssh_config, host keys checked at every hop) connects to such
a host once, and its error names the hop, the cause and the command that
fixes it. It changes nothing: no key is ever recorded here.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor

from nodetune.ansible import inventory as inventory_mod
from nodetune.ansible.inventory import Host
from nodetune.ansible.results import HostState, PlaybookResult
from nodetune.errors import NodetuneError, SSHError
from nodetune.remote import ssh

log = logging.getLogger(__name__)

TIMEOUT = 10.0


def explain(result: PlaybookResult, inv: inventory_mod.Inventory, *,
            timeout: float = TIMEOUT) -> PlaybookResult:
    """``result`` with each never-reached host's unreachable tasks saying why, where nodetune's
    SSH layer finds a cause (Ansible's own message is kept after it)."""
    never = {h.host for h in result.hosts if h.state is HostState.UNREACHABLE
             and not (h.ok or h.changed or h.failed)}
    if not never:
        return result
    try:
        hosts = [h for h in inv.select().hosts
                 if h.name in never and h.connection in ssh.SSH_CONNECTIONS]
    except NodetuneError as exc:
        log.debug("not diagnosing unreachable hosts: %s", exc)
        return result
    if not hosts:
        return result
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        causes = dict(zip((h.name for h in hosts),
                          pool.map(lambda h: cause(h, timeout=timeout), hosts), strict=True))
    tasks = tuple(
        dataclasses.replace(t, message=f"{causes[t.host]} (Ansible said: {t.message})")
        if t.status == "unreachable" and causes.get(t.host) else t
        for t in result.failed_tasks)
    return dataclasses.replace(result, failed_tasks=tasks)


def cause(host: Host, *, timeout: float = TIMEOUT) -> str | None:
    """What stops an SSH connection to ``host`` (None: it connects, or nodetune cannot tell)."""
    try:
        session = ssh.connect(host, timeout=timeout)
    except SSHError as exc:
        return exc.message
    except NodetuneError as exc:  # an option only OpenSSH honours: Ansible's word stands
        log.debug("%s: not diagnosed: %s", host.name, exc)
        return None
    session.close()
    return None
