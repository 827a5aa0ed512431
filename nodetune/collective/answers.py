"""What a node answers, checked before any of it is used.

Everything read back from a node (mktemp's directory, the worker's probe, its events)
is checked here before it becomes part of a path, a command, a signal or a result:
an empty answer once turned into uploads to ``/``. Each check raises
:class:`~nodetune.errors.LaunchError` naming the node.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodetune.collective.datapath import IFNAME, VAR_IFNAME, Interfaces
from nodetune.errors import LaunchError
from nodetune.measure import jitter, protocol
from nodetune.measure.sweep import SizeResult


@dataclass(frozen=True, slots=True)
class NodeProbe:
    """What a node reported before the launch."""

    host: str
    python: str
    torch: str | None
    cuda_devices: int
    free_port: int | None
    # Its interfaces, the route to the master included: datapath settles the data one.
    interfaces: Interfaces = field(default_factory=Interfaces)
    raw: Mapping[str, object] = field(default_factory=dict, compare=False)


def probe_from(info: Mapping[str, Any], *, host: str) -> NodeProbe:
    """The worker's probe answer as a :class:`NodeProbe`.

    Raises:
        LaunchError: a malformed answer, or a field that fails its check.
    """
    try:
        return NodeProbe(
            host=host, python=str(info.get("python")), torch=str(info.get("torch")),
            cuda_devices=int(info.get("cuda_devices") or 0),
            free_port=(checked_port(info["free_port"], host=host)
                       if info.get("free_port") is not None else None),
            interfaces=Interfaces(
                route=checked_iface(info.get("iface"), host=host),
                usable=checked_ifaces(info.get("interfaces"), host=host),
                rdma=checked_ifaces(info.get("rdma_interfaces"), host=host),
                ssh=checked_iface(info.get("ssh_iface"), host=host)),
            raw=info)
    except (TypeError, ValueError) as exc:
        raise LaunchError(f"the worker's probe answer is malformed ({exc}): {info}",
                          host=host) from None


def size_from(event: Mapping[str, Any]) -> SizeResult:
    """A ``size`` event as a result row.

    Raises:
        KeyError, TypeError, ValueError: a field missing or of the wrong type.
    """
    return SizeResult(bytes=int(event["bytes"]), count=int(event["count"]),
                      type=str(event["type"]), time_us=float(event["time_us"]),
                      algbw=float(event["algbw"]), busbw=float(event["busbw"]),
                      wrong=int(event["wrong"]), launch=str(event.get("launch", "eager")),
                      rounds=int(event.get("rounds", 1)),
                      time_us_min=_opt_float(event.get("time_us_min")),
                      time_us_max=_opt_float(event.get("time_us_max")),
                      per_iter=(jitter.per_iter(event["round_us"])
                                if event.get("round_us") is not None else None))


# The node's temp root (TMPDIR, else /tmp) on the first line, the new directory on the
# second: a constant script, nothing from the inventory in it. The run's id goes into the
# directory at once, so that a later run can tell whose leftovers it finds (worker sweep).
MKTEMP = ('root="${TMPDIR:-/tmp}"; root="${root%/}"; printf "%s\\n" "${root:-/}"; '
          'd=$(mktemp -d -p "${root:-/}" nodetune-validate.XXXXXXXX) || exit 1; '
          f'printf "%s\\n" "${protocol.RUN_VAR}" > "$d/run-id" || exit 1; '
          'printf "%s\\n" "$d"')
_TMP_NAME = re.compile(r"^nodetune-validate\.[A-Za-z0-9]{8}$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


def checked_tmpdir(stdout: str, *, host: str) -> str:
    """The directory :data:`MKTEMP` made, if it is exactly what was asked for, under the
    node's tmp.

    Raises:
        LaunchError: anything but one absolute, normalised path
            ``<tmp root>/nodetune-validate.XXXXXXXX`` below a root that is not ``/``.
    """
    lines = stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) == 2:
        root, made = lines
        parent, _, name = made.rpartition("/")
        if (_SAFE_PATH.match(root) and _SAFE_PATH.match(made) and root != "/"
                and posixpath.normpath(made) == made and parent == root
                and _TMP_NAME.match(name)):
            return made
    raise LaunchError(f"mktemp answered {stdout!r}, not one new directory "
                      "<TMPDIR or /tmp>/nodetune-validate.XXXXXXXX; nothing was written there. "
                      "Check TMPDIR and mktemp on the node", host=host)
def checked_port(value: object, *, host: str) -> int:
    """A TCP port a node reported, if it is one nodetune may listen on (1024-65535).

    Raises:
        LaunchError: not an integer in that range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1024 <= value <= 65535:
        raise LaunchError(f"the node reported free port {value!r}, not an integer in "
                          "1024-65535", host=host)
    return value


def checked_pgid(value: object, *, host: str) -> int:
    """A process group the launch guard reported, if it is one that may be signalled.

    ``kill -- -1`` signals every process the user may; 0 is the caller's own group.

    Raises:
        LaunchError: not an integer above 1.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 1:
        raise LaunchError(f"the launch guard reported process group {value!r}; refusing to "
                          "signal it", host=host)
    return value


def checked_iface(value: object, *, host: str) -> str | None:
    """An interface a node reported, if it is an interface name.

    It may become ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` on that node.

    Raises:
        LaunchError: anything but None or a valid Linux interface name.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not IFNAME.fullmatch(value) or value in (".", ".."):
        raise LaunchError(f"the node reported interface {value!r}, not an interface name; "
                          f"set {VAR_IFNAME} for this host", host=host)
    return value


def checked_ifaces(value: object, *, host: str) -> tuple[str, ...]:
    """A list of interfaces a node reported (empty when it reported none).

    Raises:
        LaunchError: not a list of valid Linux interface names.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise LaunchError(f"the node reported interfaces {value!r}, not a list", host=host)
    return tuple(n for v in value if (n := checked_iface(v, host=host)) is not None)


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
