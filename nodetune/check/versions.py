"""``fleet.versions``: whether the nodes of one check run agree on what they run.

Mismatched software across the nodes of one job is a classic cause of NCCL hangs and
slow collectives (the ranks negotiate protocols and algorithms from what each has), and
a node left behind by a maintenance window runs another firmware than its peers. Each
node reports its kernel, the NVIDIA driver and the CUDA version it supports, its GPUs'
VBIOS, torch with its CUDA and NCCL, its HCAs' firmware and the OFED / DOCA-Host
version; every value is compared with the other nodes of the run.

- A node whose value differs from the majority's is named with the majority's value
  (warn); with no majority (two nodes that differ, or a split) each is named with the
  others' values.
- The inventory's ``nodetune_expected_firmware`` pins the HCAs' firmware: a node with
  another firmware fails, whatever the majority runs. The driver's pin is gpu.driver's
  (``nvidia_driver_version``), not repeated here.
- A node whose own GPUs run different VBIOS versions warns (Azure's NHC checks the same
  consistency within a node).

Pure: the values come from the probe (:mod:`nodetune.check.node_probe`); one node
alone, or nodes that reported nothing, give no result.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.check.model import CheckResult, HelpLines, NodeChecks, failed, passed, unknown, warned
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.probe import Probe
from nodetune.errors import InputError

NAME = "fleet.versions"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("fleet.versions",
     "with 2+ nodes: kernel, driver, CUDA, GPU VBIOS, torch, NCCL, HCA",
     "firmware and OFED/DOCA agree with the other nodes (a node off the",
     "majority warns, naming its value and theirs); HCA firmware other than",
     "nodetune_expected_firmware fails (one node too); a node's GPUs on",
     "different VBIOS warn"),
)
VAR_FIRMWARE = "nodetune_expected_firmware"
# Its inventory variables' lines in check's --help (nodetune.check.listing).
VARS_HELP: HelpLines = (
    (VAR_FIRMWARE, "HCA firmware (fw_ver) every HCA runs, e.g. 28.43.2026, or a",
     "mapping of HCA names (globs) to versions"),
)
# What is compared, in the order it is reported, and how people call it.
LABELS = {"kernel": "kernel", "driver": "NVIDIA driver", "cuda": "driver's CUDA",
          "vbios": "GPU VBIOS", "torch": "torch", "torch_cuda": "torch's CUDA",
          "nccl": "NCCL", "hca_firmware": "HCA firmware", "ofed": "OFED/DOCA"}
SOURCE = f"the other nodes of this run (majority); {VAR_FIRMWARE} pins HCA firmware"
_SEP = ", "
UNREAD = "unread"  # why a value could not be read (a tool that hung): not assessed
_PATTERN = re.compile(r"^[A-Za-z0-9_.:*?\[\]-]{1,64}$")


def of(probe: Probe, smi: SmiLog | None) -> dict[str, str]:
    """What ``probe``'s node runs, by :data:`LABELS` key (a key it did not report is
    absent; several GPUs' or HCAs' different values are joined, sorted)."""
    out: dict[str, str] = {}
    if probe.kernel:
        out["kernel"] = probe.kernel
    if smi is not None:
        for key, value in (("driver", smi.driver_version), ("cuda", smi.cuda_version)):
            if value and value != "?":
                out[key] = value
        vbios = sorted({g.vbios for g in smi.gpus if g.vbios})
        if vbios:
            out["vbios"] = _SEP.join(vbios)
    torch = probe.torch or {}
    for key, field in (("torch", "torch"), ("torch_cuda", "cuda"), ("nccl", "nccl")):
        if isinstance(torch.get(field), str) and torch[field]:
            out[key] = torch[field]
    firmware = sorted(set(probe.hca_firmware.values()))
    if firmware:  # each device's own is NodeChecks.hca_firmware, which a pin is held to
        out["hca_firmware"] = _SEP.join(firmware)
    if probe.ofed:
        out["ofed"] = probe.ofed
    if probe.ofed_unknown:
        out[UNREAD] = f"ofed_info -s: {probe.ofed_unknown}"
    return out


def pin(host: Host) -> dict[str, str] | None:
    """The HCA firmware ``host``'s inventory pins (``nodetune_expected_firmware``): one
    version for every HCA, or a mapping of device names (shell globs: ``mlx5_*``) to the
    version each matching HCA must run, for a node with more than one HCA model.

    Raises:
        InputError: the variable is neither, naming the host and the variable.
    """
    raw = host.vars.get(VAR_FIRMWARE)
    if raw in (None, "", {}):
        return None
    pins = raw if isinstance(raw, Mapping) else {"*": raw}
    out = {}
    for pattern, version in pins.items():
        text = str(version).strip() if isinstance(version, str | int | float) \
            and not isinstance(version, bool) else ""
        if not _PATTERN.match(str(pattern)) or not text or _SEP in text:
            raise InputError(f"{VAR_FIRMWARE} {raw!r}: expected one firmware version, as "
                             "/sys/class/infiniband/*/fw_ver reads (e.g. 28.43.2026), or a "
                             "mapping of HCA names (globs allowed) to versions",
                             host=host.name)
        out[str(pattern)] = text
    return out


def _pinned(devices: Mapping[str, str], pins: Mapping[str, str] | None) -> list[str]:
    """How a node's HCAs (``devices``: RDMA device -> firmware) break its pins: a device
    on another firmware, a pin no device meets."""
    if not pins:
        return []
    problems = []
    for pattern, want in pins.items():
        matched = {d: v for d, v in devices.items() if fnmatch.fnmatchcase(d, pattern)}
        if not matched:
            problems.append(f"{VAR_FIRMWARE} pins {pattern if pattern != '*' else 'every HCA'}"
                            f" to {want}, but no such HCA reported its firmware")
        problems += [f"HCA {d} firmware {v}, {VAR_FIRMWARE} pins {want}"
                     for d, v in sorted(matched.items()) if v != want]
    return problems


def _majority(values: Mapping[str, str]) -> str | None:
    """The value more than half of the nodes report (None: no such value)."""
    value, count = Counter(values.values()).most_common(1)[0]
    return value if 2 * count > len(values) else None


def _differs(node: str, key: str, values: Mapping[str, str]) -> str | None:
    """How ``node``'s ``key`` differs from the others' (None when it agrees)."""
    mine = values[node]
    majority = _majority(values)
    if majority == mine or len(set(values.values())) == 1:
        return None
    if majority is not None:
        count = sum(1 for v in values.values() if v == majority)
        return (f"{LABELS[key]} {mine}, the others {majority} ({count} of {len(values)} "
                "nodes)")
    others = sorted({v for n, v in values.items() if n != node and v != mine})
    return f"{LABELS[key]} {mine}, the others {' / '.join(others)} (no majority)"


def agree(results: Mapping[str, NodeChecks], pins: Mapping[str, Mapping[str, str] | None]
          ) -> tuple[dict[str, NodeChecks], dict[str, Any]]:
    """Every node's ``fleet.versions`` added to its checks, and report.json's ``fleet``
    section (empty where fewer than two nodes reported what they run). A node alone is
    held to its firmware pin only; with no pin it gets no result."""
    reported = {n: c.versions for n, c in results.items() if c.versions}
    by_key: dict[str, dict[str, str]] = {}
    if len(reported) >= 2:
        by_key = {key: {n: v[key] for n, v in reported.items() if key in v} for key in LABELS}
        by_key = {k: v for k, v in by_key.items() if len(v) >= 2}
    out = dict(results)
    differ: dict[str, list[str]] = {}
    for node, mine in reported.items():
        if len(reported) < 2 and not pins.get(node):
            continue
        found = {key: d for key in by_key if node in by_key[key]
                 and (d := _differs(node, key, by_key[key]))}
        problems = _pinned(results[node].hca_firmware, pins.get(node))
        if problems:
            found.pop("hca_firmware", None)
        diffs = list(found.values())
        if _SEP in mine.get("vbios", ""):
            diffs.append(f"its own GPUs run different VBIOS versions ({mine['vbios']})")
        differ[node] = sorted({*found, *(["hca_firmware"] if problems else []),
                               *(["vbios"] if _SEP in mine.get("vbios", "") else [])})
        out[node] = replace(results[node], results=(
            *results[node].results, _result(mine, by_key, diffs, problems)))
    if len(reported) < 2:
        return out, {}
    section = {"nodes_compared": len(reported),
               "versions": {key: {"majority": _majority(vals), "nodes": dict(sorted(vals.items()))}
                            for key, vals in by_key.items()},
               "differ": {n: d for n, d in sorted(differ.items()) if d}}
    return out, section


def _result(mine: Mapping[str, str], by_key: Mapping[str, Mapping[str, str]],
            diffs: list[str], problems: list[str]) -> CheckResult:
    compared = [k for k in by_key if k in mine]
    expected = (f"the same {', '.join(LABELS[k] for k in compared)} as the other nodes"
                if compared else "the same versions as the other nodes")
    unread = f"; not assessed: {mine[UNREAD]}" if UNREAD in mine else ""
    if problems:
        return failed(NAME, "; ".join(problems + diffs), expected, SOURCE,
                      "; ".join(problems + diffs) + unread)
    if unread and not diffs:
        return unknown(NAME, unread.removeprefix("; "), expected=expected, source=SOURCE)
    if diffs:
        return warned(NAME, "; ".join(diffs), expected, SOURCE,
                      "differs from the other nodes: " + "; ".join(diffs)
                      + " (mismatched versions across a job's nodes are a common cause of "
                        "NCCL hangs)" + unread)
    return passed(NAME, f"{len(compared)} versions agree with the other nodes", expected,
                  SOURCE)
