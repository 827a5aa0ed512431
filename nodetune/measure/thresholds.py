"""Named bandwidth profiles: what busbw a healthy pair reaches, and where that number is from.

On exactly two nodes NCCL's tree algorithm can report a busbw above the
network's bandwidth (nccl-tests #196, #274, #153), so every profile states the
algorithm its number assumes; a ring profile makes validate run with
``NCCL_ALGO=Ring`` unless the inventory sets ``NCCL_ALGO`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nodetune.errors import InputError

GiB = 1 << 30
MiB = 1 << 20
# nccl-tests fails a run whose bandwidth is under 0.9 * NCCL_TESTS_MIN_BW;
# the profiles below apply the same margin to a published reference.
MARGIN = 0.9


@dataclass(frozen=True, slots=True)
class Profile:
    """A pass mark for busbw at the largest size of the sweep."""

    name: str
    min_busbw_gbps: float
    at_bytes: int
    algorithm: str  # "ring", "nccl-default" (tree allowed) or "gloo"
    backend: str    # "nccl" or "gloo"
    source: str
    note: str = ""
    # nccl-tests busbw (bytes, GB/s) the pass mark was taken from, where it was
    # published or measured per size; drawn as the reference curve in report.html.
    reference: tuple[tuple[int, float], ...] = ()

    @property
    def forces_ring(self) -> bool:
        """Whether the number assumes NCCL's ring algorithm."""
        return self.algorithm == "ring"


_PROFILES = (
    Profile(
        name="h100-2node-oci", min_busbw_gbps=440.0, at_bytes=16 * GiB,
        algorithm="nccl-default", backend="nccl",
        source="OCI HPC healthchecks: two-node pass mark for H100/H200/B200, busbw averaged "
               "over 1-16 GiB (oracle-quickstart/oci-hpc health checks)",
        note="an average over 1-16 GiB; compare with --sizes 1G:16G",
    ),
    Profile(
        name="h100-2node-aws-p5", min_busbw_gbps=round(MARGIN * 437.0, 1), at_bytes=GiB,
        algorithm="nccl-default", backend="nccl",
        source="2x AWS p5 (8x H100, 8x400G EFA), NCCL defaults: 437 GB/s at 1 GiB, "
               "487 at 16 GiB (AWS's published p5 nccl-tests results); pass mark = 0.9 x 437",
        reference=((GiB, 437.0), (16 * GiB, 487.0)),
    ),
    Profile(
        name="h100-ring-multinode", min_busbw_gbps=round(MARGIN * 386.6, 1), at_bytes=8 * GiB,
        algorithm="ring", backend="nccl",
        source="CoreWeave 8x H100 nodes, ring-like: 386.6 GB/s at 8 GiB (CoreWeave's published "
               "nccl-tests results); "
               "pass mark = 0.9 x 386.6; measures the network, not tree's shortcut",
    ),
    Profile(
        name="h200-nv18-pair", min_busbw_gbps=round(MARGIN * 330.0, 1), at_bytes=GiB,
        algorithm="nccl-default", backend="nccl",
        source="2x H200 on one host (NV18), nccl-tests v2.19.6 -g 2: 330 GB/s at 1 GiB, "
               "measured with nodetune's benchmark (docs/benchmarks.md); pass mark = 0.9 x 330",
        note="one GPU per inventory host, both hosts on one machine (ansible_connection: local)",
        # docs/benchmarks.md table 1, nccl-tests' in-place column
        reference=((MiB, 64.63), (4 * MiB, 120.81), (16 * MiB, 219.63), (64 * MiB, 269.69),
                   (256 * MiB, 300.48), (GiB, 328.54), (4 * GiB, 345.57)),
    ),
    Profile(
        name="lab-gloo", min_busbw_gbps=0.05, at_bytes=64 * MiB,
        algorithm="gloo", backend="gloo",
        source="two network namespaces over veth, gloo: 1.4 GB/s at 64 MiB on an idle machine "
               "(measured); podman lab nodes on a busy 2-core machine measured 0.12-0.68. "
               "0.05 is a floor that catches a broken path, not a tuning target",
    ),
)

PROFILES = MappingProxyType({p.name: p for p in _PROFILES})


def profile_named(name: str) -> Profile:
    """The profile called ``name``.

    Raises:
        InputError: no such profile (the message lists the known ones).
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError(f"unknown threshold profile {name!r}; known: "
                         + ", ".join(PROFILES)) from None


@dataclass(frozen=True, slots=True)
class Threshold:
    """The busbw pass mark that applies to a run, and why."""

    min_busbw_gbps: float
    origin: str          # "--min-busbw", "inventory nodetune_validate_min_busbw_gbps", "profile X"
    profile: Profile | None = None


def resolve(*, cli_min: float | None, inventory_min: object, profile: str | None) -> (
        Threshold | None):
    """Pick the threshold: ``--min-busbw``, else the inventory's, else the profile's.

    Raises:
        InputError: a negative or non-numeric threshold, or an unknown profile.
    """
    prof = profile_named(profile) if profile else None
    if cli_min is not None:
        if cli_min < 0:
            raise InputError(f"--min-busbw {cli_min}: must be >= 0 GB/s")
        return Threshold(cli_min, "--min-busbw", prof)
    if inventory_min not in (None, ""):
        try:
            value = float(str(inventory_min))
        except ValueError:
            raise InputError(f"nodetune_validate_min_busbw_gbps {inventory_min!r} is not a "
                             "number of GB/s") from None
        if value < 0:
            raise InputError(f"nodetune_validate_min_busbw_gbps {value}: must be >= 0")
        return Threshold(value, "inventory nodetune_validate_min_busbw_gbps", prof)
    if prof is not None:
        return Threshold(prof.min_busbw_gbps, f"profile {prof.name}", prof)
    return None


def reference_section(name: str | None) -> dict[str, Any]:
    """``{"reference": ...}`` for a run record when profile ``name`` has an nccl-tests curve
    (the HTML report draws it beside the run's own), else nothing."""
    profile = PROFILES.get(name) if name else None
    if profile is None or not profile.reference:
        return {}
    return {"reference": {"profile": profile.name,
                          "points": [[float(b), float(g)] for b, g in profile.reference]}}
