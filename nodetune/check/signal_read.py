"""What a signal check judges from, and what it gives back (:data:`nodetune.check.health.SIGNALS`).

A signal is what appears while jobs run (Xids, error counters, the fabric's state): read
once per check by the health reader (:mod:`nodetune.check.node_health`), and, for a counted
signal, judged against what the node's previous check kept for it. Each signal module's
``judge_signal`` takes a :class:`SignalRead` and gives a :class:`Judged`; a counted one
also names, in its ``KEEPS``, its keys of ``health[NODE]`` (the first holds its counters),
which the run history and the node-local state keep for the next check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodetune.check.model import CheckResult

if TYPE_CHECKING:
    from nodetune.ansible.role_defaults import Value
    from nodetune.check.gpu_read import GpuRead
    from nodetune.measure.node_inputs import HealthInputs


def as_object(value: object) -> dict[str, Any]:
    """``value`` where it is a JSON object, else {} (a reader's section, a saved part)."""
    return value if isinstance(value, dict) else {}


def as_number(value: object) -> float | None:
    """``value`` as a float where it is a JSON number, else None (a saved time)."""
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class Kept:
    """What one counted signal kept at the node's previous check for this one: its keys of
    that check's ``health[NODE]`` as written, when that check ran and which it was."""

    state: Mapping[str, Any] = field(default_factory=dict)
    time: float | None = None
    what: str = ""


def kept_state(keeps: Sequence[str], doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A counted signal's kept state in ``doc`` (a check's ``health[NODE]``, or a file
    keeping it under the same keys): its ``keeps`` keys of ``doc`` (its ``KEEPS``; the first
    holds its counters), or None where that first key is not an object there (it kept none)."""
    if not isinstance(doc.get(keeps[0]), dict):
        return None
    return {key: doc.get(key) for key in keeps}


@dataclass(frozen=True, slots=True)
class Previous:
    """What the node's previous check left in the run history."""

    xid_since: float | None = None       # the last check whose gpu.xid did not fail
    xid_what: str = ""
    kept: Mapping[str, Kept] = field(default_factory=dict)  # by counted signal's name
    time: float | None = None  # the newest previous check's (None: there is none)
    what: str = ""

    def of(self, name: str) -> Kept:
        """What the counted signal ``name`` kept at the previous check that kept it (an empty
        :class:`Kept`: none did)."""
        return self.kept.get(name) or Kept()


@dataclass(frozen=True, slots=True)
class SignalRead:
    """One node's health reading, as every signal check sees it."""

    doc: Mapping[str, Any]           # the health reader's answer
    log: Mapping[str, Any]           # its kernel log
    pcie: Mapping[str, Any]          # its PCI answer, the devices' names checked again
    ports: list[dict[str, Any]]      # its RDMA ports and their counters
    nvidia: Mapping[str, Any]        # the probe's NVIDIA reads
    gpus: GpuRead                    # the GPUs as read once
    rdma_ports: int                  # the RDMA ports the probe found
    inp: HealthInputs
    exp_modules: Value | None        # nvidia_driver_kernel_modules
    previous: Previous               # what this check counts from (the node's previous checks)
    now: float                       # when the node read its kernel log

    def section(self, key: str) -> dict[str, Any]:
        """The reader's object ``key`` ({} where it gave none)."""
        return as_object(self.doc.get(key))


@dataclass(frozen=True, slots=True)
class Judged:
    """One signal's results, and what it keeps for the next check: its ``KEEPS`` keys of
    ``health[NODE]`` (none for a signal not counted from the previous check)."""

    results: tuple[CheckResult, ...]
    keep: Mapping[str, Any] = field(default_factory=dict)


Signal = Callable[[SignalRead], Judged]
