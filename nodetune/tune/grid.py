"""The NCCL settings ``nodetune tune`` compares: each value checked as NCCL documents it,
and the combinations built from them (the node's own setting, "default", always first).

Accepted values, from NVIDIA's NCCL documentation, "Environment Variables"
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, read 2026-11-26):

- ``NCCL_ALGO``: a comma-separated list, not case sensitive, of Ring, Tree, CollnetDirect,
  CollnetChain, NVLS, NVLSTree, PAT; a list starting with ``^`` excludes them instead.
- ``NCCL_PROTO``: a comma-separated list, not case sensitive, of LL, LL128, Simple; ``^``
  excludes.
- ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``: integers (the nccl_config role checks
  1-64, as its vars/main.yml).
- ``NCCL_BUFFSIZE``: an integer number of bytes (default 4194304; a power of 2 recommended).
- ``NCCL_TOPO_FILE``: the path of an XML topology file, read by NCCL on each node.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodetune.errors import InputError
from nodetune.measure.sizes import parse_size

ALGOS = ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
MAX_CHANNELS = 64
MAX_COMBOS = 24
# The grid when no setting is named: each alone beside the node's own (default).
DEFAULT_GRID: Mapping[str, tuple[str, ...]] = {
    "NCCL_ALGO": ("Ring", "Tree"), "NCCL_PROTO": ("Simple",), "NCCL_BUFFSIZE": ("8388608",)}
# Each option of the command and the variable it sets.
OPTIONS = {"NCCL_ALGO": "--algo", "NCCL_PROTO": "--proto",
           "NCCL_MIN_NCHANNELS": "--min-nchannels", "NCCL_MAX_NCHANNELS": "--max-nchannels",
           "NCCL_BUFFSIZE": "--buffsize", "NCCL_TOPO_FILE": "--topo-file"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Combo:
    """One setting under test: the NCCL variables added to the node's environment
    (none: the default, what the node does as it is configured)."""

    env: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """``default`` or ``NCCL_ALGO=Ring NCCL_PROTO=Simple``."""
        return " ".join(f"{k}={v}" for k, v in self.env) or "default"

    @property
    def is_default(self) -> bool:
        """True for the node's own setting, the baseline."""
        return not self.env


@dataclass(frozen=True, slots=True)
class Grid:
    """The checked values of each variable, and how they combine."""

    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    cross: bool = False     # every combination; else each setting alone beside the default

    def combos(self) -> tuple[Combo, ...]:
        """The default first, then each setting (one at a time, or every cross product)."""
        names = [k for k in OPTIONS if self.values.get(k)]
        if self.cross:
            choices = [(None, *self.values[k]) for k in names]
            combos = [Combo(tuple((k, v) for k, v in zip(names, pick, strict=True)
                                  if v is not None))
                      for pick in itertools.product(*choices)]
        else:
            combos = [Combo(), *(Combo(((k, v),)) for k in names for v in self.values[k])]
        unique = tuple(dict.fromkeys(combos))
        if len(unique) > MAX_COMBOS:
            raise InputError(f"{len(unique)} combinations of settings; at most {MAX_COMBOS} "
                             "(name fewer values, or drop --cross)")
        return unique


def _listed(value: str, allowed: Sequence[str], option: str, what: str) -> str:
    """A NCCL list value (``Ring,Tree``, ``^Tree``), in NCCL's spelling.

    Raises:
        InputError: an empty list or a name NCCL does not know, naming the option.
    """
    text = value.strip()
    negate = text.startswith("^")
    names = [p.strip() for p in text.removeprefix("^").split(",")]
    canonical = {a.lower(): a for a in allowed}
    out = []
    for name in names:
        if name.lower() not in canonical:
            raise InputError(f"{option} {value!r}: {name!r} is not an NCCL {what}; NCCL "
                             f"accepts {', '.join(allowed)} (a list, or ^list to exclude)")
        out.append(canonical[name.lower()])
    return ("^" if negate else "") + ",".join(out)


def _channels(value: str, option: str) -> str:
    if not re.fullmatch(r"[0-9]+", value.strip()) or not 1 <= int(value) <= MAX_CHANNELS:
        raise InputError(f"{option} {value!r}: a whole number of channels, 1-{MAX_CHANNELS}")
    return str(int(value))


def _buffsize(value: str, option: str) -> str:
    try:
        size = int(value) if value.strip().isdigit() else parse_size(value)
    except InputError:
        raise InputError(f"{option} {value!r}: a size in bytes, e.g. 8388608 or 8M") from None
    if size < 1:
        raise InputError(f"{option} {value!r}: must be at least 1 byte")
    return str(size)


def _topo_file(value: str, option: str) -> str:
    if _CONTROL.search(value) or value != value.strip() or not value.startswith("/"):
        raise InputError(f"{option} {value!r}: the absolute path of the topology file on "
                         "the nodes, on one line without surrounding spaces")
    return value


def checked(name: str, values: Sequence[str]) -> tuple[str, ...]:
    """The values of one variable, checked and in NCCL's spelling, duplicates dropped.

    Raises:
        InputError: a value NCCL does not accept, naming the option and the value.
    """
    option = OPTIONS[name]
    if name == "NCCL_ALGO":
        out = [_listed(v, ALGOS, option, "algorithm") for v in values]
    elif name == "NCCL_PROTO":
        out = [_listed(v, PROTOS, option, "protocol") for v in values]
    elif name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
        out = [_channels(v, option) for v in values]
    elif name == "NCCL_BUFFSIZE":
        out = [_buffsize(v, option) for v in values]
    else:
        out = [_topo_file(v, option) for v in values]
    return tuple(dict.fromkeys(out))


def grid_from(given: Mapping[str, Sequence[str]], *, cross: bool = False) -> Grid:
    """The grid the options ask for: the values given, or :data:`DEFAULT_GRID` when no
    setting is named.

    Raises:
        InputError: as :func:`checked`; too many combinations.
    """
    named = {k: tuple(v) for k, v in given.items() if v}
    unknown = sorted(set(named) - set(OPTIONS))
    if unknown:
        raise InputError(f"tune compares {', '.join(OPTIONS)}; not {', '.join(unknown)}")
    source = named or DEFAULT_GRID
    grid = Grid({k: checked(k, v) for k, v in source.items()}, cross=cross)
    grid.combos()  # too many combinations is bad input too, found now
    return grid
