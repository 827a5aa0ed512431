"""The pass mark of a test of several nodes (a pair, ``--all``'s group): the options', else
the strictest of the nodes' own inventory marks, never node rank 0's alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.measure import thresholds
from nodetune.measure.thresholds import Threshold

VAR_MIN_BUSBW = "nodetune_validate_min_busbw_gbps"
VAR_PROFILE = "nodetune_validate_profile"
VAR_EXPECT = "nodetune_validate_expect_transport"
EXPECT_CHOICES = ("ib", "socket", "any")  # --expect-transport


@dataclass(frozen=True, slots=True)
class Mark:
    """The pass mark of a test of several nodes: the strictest of theirs."""

    threshold: Threshold | None
    expect: str                 # ib | socket | any
    profile: str | None         # the profile named (the chosen threshold's, else any node's)
    force_ring: bool            # some node's profile assumes NCCL's ring
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Asked:
    """What the options ask of the pass mark (validate's --min-busbw, --profile,
    --expect-transport, --collective)."""

    min_busbw: float | None = None
    profile: str | None = None
    expect_transport: str | None = None
    collective: str = "all_reduce"


def pass_mark(hosts: Sequence[Host], options: Asked) -> Mark:
    """The pass mark of a test of ``hosts``: the options', else the strictest of each host's
    inventory (the highest busbw mark; ring if any host's profile assumes it; the transport
    any host expects), not node rank 0's alone.

    Raises:
        InputError: a bad value (naming the host and variable), or hosts that expect
            different transports.
    """
    marks: list[tuple[Host, Threshold | None, str | None]] = []
    unused: list[str] = []
    for host in hosts:
        profile = options.profile or _str(host.vars.get(VAR_PROFILE))
        inventory_min = host.vars.get(VAR_MIN_BUSBW)
        if options.collective != "all_reduce":
            # Profiles and the inventory's pass mark are all_reduce numbers (busbw factor
            # 2(n-1)/n); another collective's busbw is judged only by --min-busbw.
            if options.profile:
                raise InputError(f"--profile {options.profile} is an all_reduce pass mark; "
                                 f"with --collective {options.collective} give --min-busbw "
                                 "instead")
            unused += [f"{var} {host.vars[var]}" for var in (VAR_PROFILE, VAR_MIN_BUSBW)
                       if _str(host.vars.get(var)) and f"{var} {host.vars[var]}" not in unused]
            profile, inventory_min = None, None
        try:
            threshold = thresholds.resolve(cli_min=options.min_busbw,
                                           inventory_min=inventory_min, profile=profile)
        except InputError as exc:
            raise InputError(exc.message, host=host.name) from None
        marks.append((host, threshold, profile))
    notes: tuple[str, ...] = ()
    if unused and options.min_busbw is None:
        notes = (f"no pass mark for {options.collective}: the inventory's {', '.join(unused)}"
                 " is an all_reduce one; give --min-busbw",)
    judged = [t for _h, t, _p in marks if t is not None]
    threshold = max(judged, key=lambda t: t.min_busbw_gbps) if judged else None
    profiles = [p for _h, _t, p in marks if p]
    chosen = threshold.profile.name if threshold and threshold.profile else None
    return Mark(threshold=threshold, expect=expected_transport(hosts, options),
                profile=chosen or (profiles[0] if profiles else None),
                force_ring=any(thresholds.profile_named(p).forces_ring for p in profiles),
                notes=notes)


def expected_transport(hosts: Sequence[Host], options: Asked) -> str:
    """The transport a test of ``hosts`` expects: --expect-transport, else the one any
    host's inventory expects (``any`` if none does).

    Raises:
        InputError: a bad value (naming host and variable), or hosts that expect different
            transports (naming both).
    """
    if options.expect_transport:
        expect = options.expect_transport.lower()
        if expect not in EXPECT_CHOICES:
            raise InputError(f"--expect-transport {expect!r}: choose one of "
                             + ", ".join(EXPECT_CHOICES))
        return expect
    wanted: dict[str, str] = {}
    for host in hosts:
        expect = (_str(host.vars.get(VAR_EXPECT)) or "any").lower()
        if expect not in EXPECT_CHOICES:
            raise InputError(f"{VAR_EXPECT} {expect!r}: choose one of "
                             + ", ".join(EXPECT_CHOICES), host=host.name)
        if expect != "any":
            wanted.setdefault(expect, host.name)
    if len(wanted) > 1:
        raise InputError(f"{VAR_EXPECT}: " + " and ".join(
            f"{h} expects {e}" for e, h in wanted.items())
            + "; one test cannot meet both (set one value, or --expect-transport)",
            host=next(iter(wanted.values())))
    return next(iter(wanted), "any")




def _str(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
