"""The NCCL configuration a run actually used, and where each value came from.

NCCL's ``INIT,ENV`` log (:mod:`~nodetune.measure.nccl_log` reads it) names every
``NCCL_*`` value it read, but a value from its config file and one from the environment
alike: ``NCCL_X set by environment to Y``. The config file is copied into the process
environment without overwriting (src/misc/param.cc ``setEnvFile``: ``setenv(name, value,
0)``), so the environment wins, then ``NCCL_CONF_FILE`` (or, without it,
``~/.nccl.conf``), then ``/etc/nccl.conf``, and within one file the first line of a key
(NVIDIA/nccl v2.28.9-1 src/misc/param.cc ``initEnvFunc``, read 2026-11-29). Where a value
came from is therefore found by comparing it with what the node's lead rank read before
NCCL started (the worker's ``nccl_env`` event: its ``NCCL_*`` environment and those files):

- ``environment``: the ranks' environment held it (set by nodetune for this run, or
  inherited: a host-wide setting, the container image, the login);
- ``nccl.conf``: only a config file held it (the file is named);
- ``default``: NCCL refused the value given and used its default ("Invalid value ...");
- ``unknown``: neither held it (the framework set it inside the process), or the ranks'
  inputs were not reported.

:func:`judge` holds the result to what was meant to be used (``nccl.effective``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible import nccl_settings
from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.measure import nccl_log, protocol

NAME = "nccl.effective"
SOURCES = ("environment", "nccl.conf", "default", "unknown")
EVENT = "nccl_env"  # the worker's report of what its ranks read before NCCL started
# NCCL's own logging settings: NCCL never logs reading them as a setting.
NOT_SETTINGS = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",
                          "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS"})
# Compared without case: NCCL matches these names with strcasecmp (src/graph/tuning.cc).
_NO_CASE = frozenset({"NCCL_ALGO", "NCCL_PROTO"})
# src/graph/paths.cc ncclGetLevel: a *_LEVEL value is a path name (strcmp, upper case) or
# an old number mapped through levelsOldToNew; NCCL logs the name (topoPathTypeStr).
_LEVEL_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEVELS_OLD_TO_NEW = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
_INT = re.compile(r"\s*[+-]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*")


def conf_values(content: str) -> dict[str, str]:
    """KEY=VALUE lines as NCCL reads its config file: '#' lines skipped, the first
    occurrence of a key wins (setenv without overwrite; NVIDIA/nccl src/misc/param.cc)."""
    values: dict[str, str] = {}
    for line in content.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            values.setdefault(key, value)
    return values


@dataclass(frozen=True, slots=True)
class NodeInputs:
    """What a node's ranks held before NCCL started: their ``NCCL_*`` environment and
    NCCL's config files in the order NCCL reads them (``content`` None: not there)."""

    env: Mapping[str, str] = field(default_factory=dict)
    files: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def from_event(cls, doc: Mapping[str, Any]) -> NodeInputs:
        """The worker's ``nccl_env`` event; odd fields are left out, never trusted."""
        env = doc.get("env") if isinstance(doc.get("env"), Mapping) else {}
        files = []
        for f in doc.get("files") or ():
            if isinstance(f, Mapping) and isinstance(f.get("path"), str):
                content = f.get("content")
                files.append((f["path"], content if isinstance(content, str) else None))
        return cls(env={str(k): str(v) for k, v in (env or {}).items()}, files=tuple(files))

    def in_files(self) -> dict[str, tuple[str, str]]:
        """NCCL key -> (value, file) as NCCL would take them from its config files."""
        out: dict[str, tuple[str, str]] = {}
        for path, content in self.files:
            for key, value in conf_values(content or "").items():
                out.setdefault(key, (value, path))
        return out


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``NCCL_*`` value NCCL reported using."""

    name: str
    value: str
    source: str          # one of SOURCES
    where: str = ""      # "set by nodetune for this run", "/etc/nccl.conf", ...
    note: str = ""


@dataclass(frozen=True, slots=True)
class Effective:
    """One node's NCCL as its ranks' log reports it."""

    node: str
    ranks: int = 0
    version: str | None = None
    net_plugin: str | None = None
    transports: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # "0->1" -> paths
    gdr: bool | None = None
    nvls: bool = False
    nvls_channels: int | None = None
    collnet: bool | None = None
    settings: tuple[Setting, ...] = ()
    env_logged: bool = False      # any "set by environment to" line: ENV was logged
    inputs: NodeInputs | None = None  # None: the ranks did not report what they held

    def get(self, name: str) -> Setting | None:
        """The setting NCCL reported for ``name``."""
        return next((s for s in self.settings if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``nccl_effective[node]``."""
        return {"version": self.version, "ranks": self.ranks, "net_plugin": self.net_plugin,
                "transports": {k: list(v) for k, v in self.transports.items()},
                "gdr": self.gdr, "nvls": {"used": self.nvls, "channels": self.nvls_channels},
                "collnet": self.collnet, "env_logged": self.env_logged,
                "inputs_read": self.inputs is not None,
                "config_files": [p for p, c in self.inputs.files if c is not None]
                if self.inputs else [],
                "settings": {s.name: {"value": s.value, "source": s.source, "where": s.where,
                                      **({"note": s.note} if s.note else {})}
                             for s in self.settings}}


def inputs_of(lines: Iterable[str]) -> NodeInputs | None:
    """The node's ``nccl_env`` event among its worker's lines (None: not reported)."""
    found = None
    for line in lines:
        doc = protocol.decode(line)
        if doc is not None and doc["event"] == EVENT:
            found = NodeInputs.from_event(doc)
    return found


def _source(name: str, inputs: NodeInputs | None, run_env: Mapping[str, str]
            ) -> tuple[str, str, str | None]:
    """(source, where, the raw value there) of a value NCCL reported."""
    if inputs is None:
        if name in run_env:
            return "environment", "set by nodetune for this run", run_env[name]
        return "unknown", "the ranks did not report their environment", None
    if name in inputs.env:
        raw = inputs.env[name]
        mine = run_env.get(name) == raw
        return ("environment", "set by nodetune for this run" if mine else
                "inherited environment (not set by nodetune: host-wide, image or login)", raw)
    files = inputs.in_files()
    if name in files:
        return "nccl.conf", files[name][1], files[name][0]
    return "unknown", "in neither the ranks' environment nor NCCL's config files", None


def node_effective(node: str, lines: Sequence[str], *,
                   run_env: Mapping[str, str] | None = None) -> Effective:
    """``node``'s effective NCCL from its worker's output: every rank's NCCL lines and the
    lead rank's ``nccl_env`` event. ``run_env``: the environment nodetune gave its ranks."""
    run_env = run_env or {}
    inputs = inputs_of(lines)
    ranks = nccl_log.by_rank(lines)
    logs = [nccl_log.parse(rank_lines) for rank_lines in ranks.values()]
    merged = nccl_log.parse(ln for rank_lines in ranks.values() for ln in rank_lines)
    settings = []
    names = sorted({k for lg in logs for k in lg.env} | {k for lg in logs for k in lg.invalid})
    for name in names:
        source, where, raw = _source(name, inputs, run_env)
        values = sorted({lg.env[name] for lg in logs if name in lg.env})
        invalid = next((lg.invalid[name] for lg in logs if name in lg.invalid), None)
        note = ""
        if invalid is not None:
            note = f"{invalid[0]!r} from {source} ({where}) is not a number: NCCL used its default"
            settings.append(Setting(name, invalid[1], "default", "NCCL's default", note))
            continue
        if len(values) > 1:
            note = "ranks disagree: " + ", ".join(values)
        elif raw is not None and not same(name, raw, values[0]):
            note = f"NCCL read {raw!r} as {values[0]}"
        settings.append(Setting(name, values[0], source, where, note))
    return Effective(
        node=node, ranks=len(ranks), version=merged.version, net_plugin=merged.net_plugin,
        transports=merged.peers, gdr=merged.gdr, nvls=merged.nvls,
        nvls_channels=merged.nvls_channels, collnet=merged.collnet, settings=tuple(settings),
        env_logged=bool(merged.env or merged.invalid), inputs=inputs)


def effective(logs: Mapping[str, Sequence[str]],
              run_env: Mapping[str, Mapping[str, str]]) -> dict[str, Effective]:
    """Every node's effective NCCL (:func:`node_effective`)."""
    return {node: node_effective(node, lines, run_env=run_env.get(node, {}))
            for node, lines in logs.items()}


def _level(text: str) -> str | None:
    value = text.strip()
    if value in _LEVEL_NAMES:
        return value
    if value[:1].isdigit():
        return _LEVELS_OLD_TO_NEW[min(int(re.match(r"\d+", value)[0]),  # type: ignore[index]
                                      len(_LEVELS_OLD_TO_NEW) - 1)]
    return None


def _c_int(text: str) -> int:
    """An integer as C's strtoll(text, NULL, 0) reads it (0x hex, leading-0 octal)."""
    value = text.strip()
    sign = -1 if value.startswith("-") else 1
    digits = value.lstrip("+-")
    if digits[:2].lower() == "0x":
        return sign * int(digits, 16)
    return sign * int(digits, 8 if len(digits) > 1 and digits[0] == "0" else 10)


def same(name: str, wanted: str, logged: str) -> bool:
    """Whether NCCL's logged value is ``wanted`` as NCCL reads it: whole integers by value
    (NCCL logs them with %lld), ``*_LEVEL`` by path name, NCCL_ALGO/PROTO without case."""
    wanted, logged = wanted.strip(), logged.strip()
    if name.endswith("_LEVEL") and logged in _LEVEL_NAMES:
        return _level(wanted) == logged
    if _INT.fullmatch(wanted) and _INT.fullmatch(logged):
        return _c_int(wanted) == _c_int(logged)
    if name in _NO_CASE:
        return wanted.lower() == logged.lower()
    return wanted == logged


@dataclass(frozen=True, slots=True)
class Expected:
    """A value meant to reach NCCL, and who set it (``nccl_config_ib_hca (inventory)``,
    ``nodetune_env``, a tune recommendation)."""

    name: str
    value: str
    where: str


@dataclass(frozen=True, slots=True)
class Judgement:
    """:func:`judge`'s answer for one node."""

    used: tuple[str, ...] = ()         # NCCL_X=V confirmed by NCCL's log
    problems: tuple[str, ...] = ()     # a value NCCL did not use: the check fails
    unconfirmed: tuple[str, ...] = ()  # given to NCCL, which did not log reading it
    unassessed: str | None = None      # why nothing could be proven (no ENV lines)

    @property
    def ok(self) -> bool | None:
        """True: every value proven used; False: one was not; None: not assessed."""
        if self.problems:
            return False
        return None if self.unassessed else True

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``nccl_effective[node]["check"]``."""
        status = {True: "pass", False: "fail", None: "not assessed"}[self.ok]
        return {"name": NAME, "status": status, "used": list(self.used),
                "problems": list(self.problems), "unconfirmed": list(self.unconfirmed),
                **({"unassessed": self.unassessed} if self.unassessed else {})}


def judge(eff: Effective, expected: Iterable[Expected]) -> Judgement:
    """Each expected value against what NCCL reported using on the node.

    A value NCCL logged otherwise, refused, or could not have seen (in neither the ranks'
    environment nor its config files: NCCL's default applied) is a problem naming what NCCL
    used and its source. A value the ranks held but NCCL did not log reading is
    unconfirmed, not a problem: NCCL reads many settings only on the path that needs them
    (an IB setting on a run without IB) and logs only some string settings. No ENV lines
    at all (``NCCL_DEBUG_SUBSYS`` without ENV, or an NCCL too old) proves nothing.
    """
    wanted = [e for e in expected if e.name not in NOT_SETTINGS]
    if not wanted:
        return Judgement()
    if not eff.env_logged:
        return Judgement(unassessed=(
            f"no 'set by environment' line in NCCL's log on {eff.node} (NCCL_DEBUG_SUBSYS "
            "without ENV, or no NCCL run): the values set are not proven used"))
    used, problems, unconfirmed = [], [], []
    files = eff.inputs.in_files() if eff.inputs else {}
    for e in wanted:
        got = eff.get(e.name)
        asked = f"{e.name}={e.value} ({e.where})"
        if got is not None and got.source == "default":
            problems.append(f"{asked}: NCCL used {e.name}={got.value}, its default ({got.note})")
        elif got is not None and same(e.name, e.value, got.value):
            used.append(f"{e.name}={got.value}")
        elif got is None and e.name.endswith("_LEVEL") and _level(e.value) is None:
            problems.append(f"{asked}: NCCL does not take this value (a path name in upper "
                            "case, LOC to SYS, or a number; src/graph/paths.cc), so it used "
                            "its default")
        elif got is not None:
            problems.append(f"{asked}: NCCL used {e.name}={got.value} from {got.source} "
                            f"({got.where})")
        elif eff.inputs is not None and e.name in eff.inputs.env \
                and not same(e.name, e.value, eff.inputs.env[e.name]):
            problems.append(f"{asked}: the ranks' environment held {e.name}="
                            f"{eff.inputs.env[e.name]}, which wins over any config file")
        elif eff.inputs is not None and e.name not in eff.inputs.env and e.name in files \
                and not same(e.name, e.value, files[e.name][0]):
            problems.append(f"{asked}: NCCL's config file {files[e.name][1]} held "
                            f"{e.name}={files[e.name][0]}")
        elif eff.inputs is not None and e.name not in eff.inputs.env and e.name not in files:
            read = ", ".join(p for p, _ in eff.inputs.files) or "no config file"
            problems.append(f"{asked}: NCCL used its default: {e.name} was in neither the "
                            f"ranks' environment nor NCCL's config files ({read})")
        else:
            unconfirmed.append(f"{e.name}={e.value}")
    return Judgement(tuple(used), tuple(problems), tuple(unconfirmed))


def expected_for(host: Host, run_env: Mapping[str, str], inventory_env: Mapping[str, str]
                 ) -> tuple[list[Expected], str | None]:
    """What NCCL on ``host`` was meant to use: every ``NCCL_*`` of the ranks' environment
    (``nodetune_env``, a tune setting, nodetune's own), then the nccl_config role's
    settings for the keys the environment leaves to the file. The second item says why
    nccl_config's settings could not be read (None: they were)."""
    out = [Expected(k, v, "nodetune_env" if inventory_env.get(k) == v
                    else "set by nodetune for this run")
           for k, v in sorted(run_env.items()) if k.startswith("NCCL_")
           and k not in NOT_SETTINGS and k != "NCCL_CONF_FILE"]
    try:
        role = nccl_settings.nccl_settings(nccl_settings.HostVars(host))
    except InputError as exc:
        return out, f"nccl_config's settings not judged: {exc.message}"
    out += [Expected(k, nccl_settings.text(v.value), v.source)
            for k, v in sorted(role.items()) if k not in run_env]
    return out, None


def assess_node(host: Host, lines: Sequence[str], *, run_env: Mapping[str, str],
                inventory_env: Mapping[str, str]) -> tuple[Effective, Judgement, str | None]:
    """One node's effective NCCL, judged against what was meant to reach it; the third
    item says why nccl_config's settings were left out (None: they were judged)."""
    eff = node_effective(host.name, lines, run_env=run_env)
    expected, unread = expected_for(host, run_env, inventory_env)
    return eff, judge(eff, expected), unread


def assess(host: Host, lines: Sequence[str], *, run_env: Mapping[str, str],
           inventory_env: Mapping[str, str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """One node's ``nccl_effective`` section of report.json (with its ``check``) and the
    warnings a run prints for it: each value NCCL did not use, or why none was proven."""
    eff, verdict, unread = assess_node(host, lines, run_env=run_env,
                                       inventory_env=inventory_env)
    doc = {**eff.to_dict(), "check": verdict.to_dict()}
    warnings = [f"{NAME} on {host.name}: {p}" for p in verdict.problems]
    if verdict.unassessed:
        warnings.append(f"{NAME} on {host.name}: not assessed: {verdict.unassessed}")
    if unread:
        doc["check"]["note"] = unread
        warnings.append(f"{NAME} on {host.name}: {unread}")
    return doc, tuple(warnings)
