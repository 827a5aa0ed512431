"""Filters for the nccl_config role: type-check NCCL_* settings; tell a file already written."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.nics import (
    from_facts,
    hca_candidates,
    nccl_problem,
    node_nics_text,
    socket_candidates,
)

# The settings that name the node's interfaces and RDMA devices.
NIC_KEYS = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")

KEY_RE = re.compile(r"^NCCL_[A-Z0-9_]+$")
# A line break, carriage return or other control character would start a
# line of its own in /etc/nccl.conf (another key, or a marker that breaks the
# managed block).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _check_value(value: str, spec: dict[str, Any]) -> str | None:
    """Return why value does not fit spec, or None."""
    kind = spec.get("type", "str")
    if kind == "int" or (kind == "int_or_choice" and value not in spec.get("choices", [])):
        if not re.fullmatch(r"-?[0-9]+", value):
            extra = f" or one of {', '.join(spec['choices'])}" if kind == "int_or_choice" else ""
            return f"is not an integer{extra}"
        number = int(value)
        low, high = spec.get("min"), spec.get("max")
        if (low is not None and number < low) or (high is not None and number > high):
            return f"is outside {low}-{high}"
    elif kind == "choice" and value not in spec["choices"]:
        return f"is not one of {', '.join(spec['choices'])}"
    elif kind == "bool01" and value not in ("0", "1"):
        return "is not 0 or 1"
    elif kind == "list" and not re.fullmatch(
        spec.get("pattern", r"[\^=]?[A-Za-z0-9_.:,-]+"), value
    ):
        return "is not a comma-separated list of names (optionally prefixed by ^ or =)"
    return None


def nccl_config_check(
    settings: dict[str, Any], known: dict[str, dict[str, Any]], sources: dict[str, str]
) -> dict[str, list[str]]:
    """Check NCCL settings; return {"errors": [...], "warnings": [...]}.

    sources maps a key to the role variable that set it, so messages name
    what the user wrote. A value must fit on one line (NCCL reads KEY=VALUE
    lines). Unknown NCCL_* keys are written but warned about.
    """
    errors: list[str] = []
    warnings: list[str] = []
    for key, raw in settings.items():
        where = sources.get(key, f"nccl_config_extra.{key}")
        value = str(int(raw)) if isinstance(raw, bool) else str(raw)
        if not KEY_RE.fullmatch(key):
            errors.append(f"{where}: '{key}' is not an NCCL_* variable name")
            continue
        if CONTROL_RE.search(value) or value != value.strip() or value == "":
            errors.append(
                f"{where} ({key}): value must be a single non-empty line without "
                "control characters or surrounding spaces"
            )
            continue
        if key not in known:
            warnings.append(
                f"{where}: {key} is not a variable nodetune knows; "
                "written as given, check the NCCL docs"
            )
            continue
        problem = _check_value(value, known[key])
        if problem:
            errors.append(f"{where} ({key}): '{value}' {problem}")
    return {"errors": errors, "warnings": warnings}


def nccl_config_absent_nics(settings: dict[str, Any], sources: dict[str, str],
                            facts: Any) -> str:
    """Why NCCL_SOCKET_IFNAME / NCCL_IB_HCA do not fit this node (``""`` when they do).

    Each entry must match one of the node's interfaces or RDMA device ports, by
    NCCL's own rules (``^`` excludes, ``=`` exact, else a prefix, ``NAME:PORT``),
    and an exclusion must leave something of what the node has. ``facts`` is
    node_facts' fact (``ansible_local.nodetune``); ``sources`` maps a key to the
    role variable that set it.

    Raises:
        ValueError: ``facts`` is not node_facts' fact (see ``from_facts``).
    """
    links, devices = from_facts(facts)
    interfaces = list(links)
    problems = []
    for key in NIC_KEYS:
        value = settings.get(key)
        if value in (None, ""):
            continue
        candidates = (socket_candidates(interfaces) if key == "NCCL_SOCKET_IFNAME"
                      else hca_candidates(devices))
        problem = nccl_problem(key, str(value), candidates)
        if problem:
            problems.append(f"{sources.get(key, f'nccl_config_extra.{key}')} ({key}={value}): "
                            f"{problem}")
    if not problems:
        return ""
    return ("; ".join(problems) + f"; {node_nics_text(interfaces, devices)}"
            "; set nccl_config_allow_absent_nics: true where nodes differ and a name may "
            "be absent")


def nccl_config_block_kept(state: Any, path: str, marker: str, block: str, mode: str,
                           uid: int, gid: int) -> bool:
    """Whether ``ansible.builtin.blockinfile`` would leave the file as ``state`` describes it.

    ``state`` is node_facts' ``nccl_conf`` (path, content, mode, uid, gid of the file as
    this run's fact gathering read it). blockinfile finds the last BEGIN and the last END
    marker line and puts the block between them: nothing changes where those lines are
    already the markers around exactly this block, with this mode and owner.
    """
    if not isinstance(state, dict) or state.get("path") != path \
            or not isinstance(state.get("content"), str):
        return False
    if (state.get("mode"), state.get("uid"), state.get("gid")) != (mode, uid, gid):
        return False
    begin, end = (marker.replace("{mark}", mark) + "\n" for mark in ("BEGIN", "END"))
    text = block if block.endswith("\n") else block + "\n"
    wanted = [begin, *text.splitlines(True), end]
    lines = state["content"].splitlines(True)
    first = last = None
    for i, line in enumerate(lines):
        if line == begin:
            first = i
        if line == end:
            last = i
    return first is not None and last is not None and first < last \
        and lines[first:last + 1] == wanted


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {"nccl_config_absent_nics": nccl_config_absent_nics,
                "nccl_config_check": nccl_config_check,
                "nccl_config_block_kept": nccl_config_block_kept}
