"""The environment a node's workers get from its inventory (``nodetune_env``,
``nodetune_cuda_visible_devices``), before nodetune's additions: validate's ranks and the
Python ``check`` reads torch's versions with start in it; and that Python
(``nodetune_python``)."""

from __future__ import annotations

from collections.abc import Mapping

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.measure.result import HelpLines
from nodetune.remote.session import ENV_NAME

VAR_ENV = "nodetune_env"
VAR_CUDA = "nodetune_cuda_visible_devices"
VAR_PYTHON = "nodetune_python"
# nodetune_env's lines in check's --help (nodetune.check.listing).
VARS_HELP: HelpLines = ((VAR_ENV, "environment for the all_reduce (NCCL_*)"),)


def node_python(host: Host) -> str:
    """The node's python (``nodetune_python``, default ``python3``)."""
    return str(host.vars.get(VAR_PYTHON) or "python3")


def host_env(host: Host) -> dict[str, str]:
    """Environment for the node's workers from its inventory, before nodetune's additions.

    Raises:
        InputError: ``nodetune_env`` is not a mapping.
    """
    raw = host.vars.get(VAR_ENV) or {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{VAR_ENV} must be a mapping of NAME: value, got {type(raw).__name__}",
                         host=host.name)
    env = {str(k): _env_value(v) for k, v in raw.items()}
    bad = [k for k in env if not ENV_NAME.match(k)]
    if bad:
        raise InputError(f"{VAR_ENV}: {bad[0]!r} is not an environment variable name "
                         "(letters, digits and _, not starting with a digit)", host=host.name)
    cuda = host.vars.get(VAR_CUDA)
    if cuda not in (None, ""):
        env["CUDA_VISIBLE_DEVICES"] = _env_value(cuda)
    return env


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
