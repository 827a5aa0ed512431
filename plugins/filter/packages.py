"""What a package task run in check mode would have changed, as lines a report lists.

On a node Slurm has allocated, the driver-stack roles run their package tasks in check
mode (apt/dnf read the node and predict, changing nothing) and list the prediction as
deferred; the next run on an idle node installs them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# apt-get --simulate prints one line per action: "Inst NAME [OLD] (NEW REPO [ARCH])"
# for an install or upgrade (no [OLD] for a new package) and "Remv NAME [OLD]" for a
# removal (apt-get(8), -s; the "Inst"/"Remv" lines of apt's simulate output, read
# 2026-11-29). ansible.builtin.apt returns that output as stdout in check mode.
APT_LINE = re.compile(r"^(Inst|Remv) (\S+)(?: \[([^\]]+)\])?(?: \((\S+))?", re.MULTILINE)
# ansible.builtin.dnf in check mode lists "Installed: NEVRA" / "Removed: NEVRA" in results.
DNF_LINE = re.compile(r"^(Installed|Removed|Upgraded|Downgraded): (\S+)$")


def _version_key(version: str) -> list[tuple[int, object]]:
    """A loose ordering of Debian/RPM versions: digit runs as numbers, the rest as text."""
    return [(0, int(part)) if part.isdigit() else (1, part)
            for part in re.findall(r"\d+|[A-Za-z]+", version)]


def _apt_lines(stdout: str) -> list[str]:
    lines = []
    for action, name, old, new in APT_LINE.findall(stdout):
        if action == "Remv":
            lines.append(f"{name} {old or '?'} (package removal)")
        elif not old:
            lines.append(f"{name} {new} (package install)")
        elif old != new:
            kind = "downgrade" if _version_key(new) < _version_key(old) else "upgrade"
            lines.append(f"{name} {old} → {new} (package {kind})")
    return lines


def _dnf_lines(results: Any) -> list[str]:
    kinds = {"Installed": "install", "Removed": "removal", "Upgraded": "upgrade",
             "Downgraded": "downgrade"}
    return [f"{m.group(2)} (package {kinds[m.group(1)]})"
            for line in (results if isinstance(results, list) else [])
            if (m := DNF_LINE.match(str(line)))]


def nodetune_package_changes(results: list[Any], role: str) -> list[str]:
    """``role: NAME OLD → NEW (package upgrade)`` for each package change the check-mode
    package tasks ``results`` (registered results; skipped ones are passed over) predict."""
    lines: list[str] = []
    for result in results or []:
        if not isinstance(result, Mapping) or result.get("skipped"):
            continue
        if result.get("pending"):
            names = (result.get("packages")
                     or (result.get("invocation") or {}).get("module_args", {}).get("name") or [])
            names = names if isinstance(names, list) else [names]
            lines.append(f"{', '.join(map(str, names)) or 'packages'} (package install or "
                         "upgrade; not predicted: python3-apt is not installed)")
            continue
        lines += _apt_lines(str(result.get("stdout") or ""))
        lines += _dnf_lines(result.get("results"))
    return [f"{role}: {line}" for line in dict.fromkeys(lines)]


class FilterModule:
    """nodetune.cluster.nodetune_package_changes."""

    def filters(self) -> dict[str, Any]:
        """The filters of this file."""
        return {"nodetune_package_changes": nodetune_package_changes}
