"""Run the node probe (:mod:`nodetune.check.node_probe`) through the executor and read its answer
(:mod:`nodetune.check.probe_parse`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.check import node_program
from nodetune.check.expect import Expectations
from nodetune.check.model import HelpLines
from nodetune.check.node_probe import TORCH_SNIPPET
from nodetune.check.probe_parse import Probe, parse
from nodetune.errors import LaunchError, NodeTimeout, SSHError
from nodetune.remote import ssh
from nodetune.remote.executor import Command, NodeRunner

_AUTO = ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent")
VAR_INTERPRETER = "ansible_python_interpreter"
# Its inventory variable's line in check's --help (nodetune.check.listing).
VARS_HELP: HelpLines = ((VAR_INTERPRETER, "python that runs the probe (default python3)"),)
__all__ = ["Probe", "parse", "probe_python", "request", "run_probe", "source", "torch_only"]


def source() -> str:
    """The probe program's source, run on the node with ``python -c``.

    It carries node_facts' fact script, whose functions read the PCI bus and the RDMA
    ports for the probe as they do for the roles, :mod:`nodetune.check.node_host`
    (time sync, host-wide environment), :mod:`nodetune.check.node_nvml` (the GPUs through
    NVML) and :mod:`nodetune.check.node_run` (the runner
    every tool goes through).
    """
    return node_program.embed("node_probe.py", FACT_SOURCE=node_program.fact_text(),
                              HOST_SOURCE=node_program.text("node_host.py"),
                              NVML_SOURCE=node_program.text("node_nvml.py"))


def probe_python(host: Host) -> str:
    """The interpreter that runs the probe: ``ansible_python_interpreter`` or ``python3``.

    A templated value (``{{ ansible_playbook_python }}`` for local hosts) means the
    controller's own Python on a local host.
    """
    value = str(host.vars.get(VAR_INTERPRETER) or "")
    if host.connection in ssh.LOCAL_CONNECTIONS and (not value or "{{" in value):
        return sys.executable
    if not value or "{{" in value or value in _AUTO:
        return "python3"
    return value


def request(exp: Expectations, *, timeout: float, torch: bool = True,
            env: Mapping[str, str] | None = None, ppcc: bool = False) -> dict[str, Any]:
    """The probe's one argument: which sysctls to read, which python has torch (none where
    ``torch`` is False: the caller reads torch's versions elsewhere), which NCCL config
    file, whether to read the RoCE ports' PPCC register (``check --read-ppcc``), each
    tool's timeout and the time all of them have together."""
    return {"sysctls": exp.sysctl_keys, "torch_python": exp.torch_python if torch else None,
            "torch_env": dict(env or {}), "ppcc": ppcc,
            "nccl_conf": exp.nccl_path, "timeout": max(5.0, timeout / 2),
            # every tool has answered (or been killed) by then, within the launcher's wait
            "budget": max(5.0, timeout * 0.8)}


def run_probe(node: NodeRunner, host: Host, exp: Expectations, *, timeout: float,
              torch: bool = True, env: Mapping[str, str] | None = None,
              ppcc: bool = False) -> Probe:
    """Run the probe on ``host`` (one command, nothing left on the node) and parse it.

    Raises:
        LaunchError: no Python to run it, or an answer that is not the probe's.
        NodeTimeout: no answer within ``timeout``.
    """
    python = probe_python(host)
    asked = request(exp, timeout=timeout, torch=torch, env=env, ppcc=ppcc)
    # -S (node_program.launch): torch is read by the probe's own child, with site
    res = node_program.launch(node, python, source(), asked, timeout=timeout)
    if res.exit_status in (126, 127):
        raise LaunchError(f"{python!r} not found on the node; set ansible_python_interpreter "
                          "to its Python 3", host=host.name)
    return parse(host.name, node_program.answer(res, python=python, mark="probe",
                                                what="the check probe", host=host.name,
                                                needs="; it needs Python >= 3.8"))


def torch_only(node: NodeRunner, python: str, *, timeout: float,
               env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """torch's versions as the probe reads them (:data:`node_probe.TORCH_SNIPPET`), alone,
    within the probe's own limit for it; a hung or failed import is the answer's error."""
    limit = max(5.0, timeout / 2)
    try:
        res = node.run(Command([python, "-c", TORCH_SNIPPET], env=dict(env or {})),
                       timeout=limit)
    except (NodeTimeout, SSHError) as exc:
        return {"error": f"exit None: {exc.message}"}
    doc = node_program.last_object(res.stdout) if res.exit_status == 0 else None
    if doc is not None:
        return doc
    detail = (res.stderr or res.stdout).strip()[-300:]
    return {"error": f"exit {res.exit_status}: {detail}"}
