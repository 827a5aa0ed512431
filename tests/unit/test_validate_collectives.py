"""The collectives ``validate --collective`` times: busbw held to nccl-tests' own formulas,
and the plan that carries the choice to the ranks.

nccl-tests computes, per collective (src/all_reduce.cu, all_gather.cu, reduce_scatter.cu,
alltoall.cu, ``<Name>GetBw`` and ``<Name>GetCollByteCount``; doc/PERFORMANCE.md), from
the per-rank ``paramcount`` it passes to NCCL:

  all_reduce      baseBw = count * typesize / 1e9 / sec            busBw = baseBw * 2(n-1)/n
  all_gather      baseBw = sendcount * typesize * n / 1e9 / sec    busBw = baseBw * (n-1)/n
  reduce_scatter  baseBw = recvcount * typesize * n / 1e9 / sec    busBw = baseBw * (n-1)/n
  alltoall        baseBw = (count/n) * n * typesize / 1e9 / sec    busBw = baseBw * (n-1)/n

with every per-rank count ``count / n`` (whole elements). The worker computes from the
size's whole buffer instead; these tests hold the two to the same numbers.
"""

from __future__ import annotations

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import plan
from nodetune.collective.answers import NodeProbe
from nodetune.collective.datapath import Interfaces
from nodetune.collective.worker import collectives
from nodetune.errors import InputError
from nodetune.measure.protocol import COLLECTIVES

TYPESIZE = 4  # float


def nccl_tests_bw(collective: str, nbytes: int, sec: float, n: int) -> tuple[float, float]:
    """(algBw, busBw) the way nccl-tests' GetCollByteCount and GetBw compute them."""
    count = nbytes // TYPESIZE
    if collective == "all_reduce":
        base = count * TYPESIZE / 1.0e9 / sec
        return base, base * (2.0 * (n - 1)) / n
    param = count // n  # sendcount (all_gather), recvcount (reduce_scatter), count/n (alltoall)
    base = param * TYPESIZE * n / 1.0e9 / sec
    return base, base * (n - 1) / n


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("n", [2, 3, 8, 16])
@pytest.mark.parametrize(("nbytes", "sec"), [(1 << 20, 37.5e-6), (1 << 30, 2.5e-3),
                                             (3_000_000, 1.0e-3)])
def test_busbw_is_nccl_tests_formula(collective: str, n: int, nbytes: int, sec: float) -> None:
    whole = collectives.elements(collective, nbytes // TYPESIZE, n) * TYPESIZE  # what is reported
    algbw, busbw = collectives.bandwidths(whole, sec, n, collective)
    want_alg, want_bus = nccl_tests_bw(collective, nbytes, sec, n)
    assert algbw == pytest.approx(want_alg, rel=1e-12)
    assert busbw == pytest.approx(want_bus, rel=1e-12)


def test_the_factors_differ_where_nccl_tests_differ() -> None:
    # 2 nodes x 8 ranks: all_reduce moves twice what the others move per byte of size.
    assert collectives.bus_factor("all_reduce", 16) == pytest.approx(2 * 15 / 16)
    for collective in ("all_gather", "reduce_scatter", "alltoall"):
        assert collectives.bus_factor(collective, 16) == pytest.approx(15 / 16)
        assert collectives.bus_factor(collective, 16) != collectives.bus_factor("all_reduce", 16)
    assert collectives.bus_factor("alltoall", 2) == 0.5


def test_sizes_are_whole_chunks_per_rank_as_in_nccl_tests() -> None:
    # 1 MiB over 3 ranks: 262144 floats -> 87381 per rank -> 262143 in all.
    assert collectives.elements("all_gather", 262144, 3) == 262143
    assert collectives.elements("all_reduce", 262144, 3) == 262144
    assert collectives.elements("alltoall", 1, 4) == 4  # never an empty chunk


def _pair(**master_vars: object) -> plan.Pair:
    return plan.Pair(Host("a", ("gpu_nodes",), {"ansible_host": "10.0.0.1", **master_vars}),
                     Host("b", ("gpu_nodes",), {"ansible_host": "10.0.0.2"}))


def _probe(name: str, port: int | None = None) -> NodeProbe:
    return NodeProbe(name, "3.11", "2.13", 0, port, Interfaces(route="eth0"))


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_the_ranks_are_told_the_collective(collective: str) -> None:
    p = plan.plan_pair(_pair(), plan.Options(collective=collective))
    argv = p.complete([_probe("a", 29500), _probe("b")]).spec(p.nodes[1])["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--collective") + 1] == collective


def test_an_unknown_collective_is_bad_input() -> None:
    with pytest.raises(InputError, match="--collective 'broadcast': choose all_reduce"):
        plan.plan_pair(_pair(), plan.Options(collective="broadcast"))


def test_an_all_reduce_profile_is_refused_for_another_collective() -> None:
    with pytest.raises(InputError, match="--profile lab-gloo is an all_reduce pass mark"):
        plan.plan_pair(_pair(), plan.Options(collective="alltoall", profile="lab-gloo"))


def test_the_inventory_pass_mark_is_not_applied_to_another_collective_and_says_so() -> None:
    inv = {"nodetune_validate_profile": "lab-gloo"}
    p = plan.plan_pair(_pair(**inv), plan.Options(collective="all_gather"))
    assert p.threshold is None and p.profile is None
    assert p.notes == ("no pass mark for all_gather: the inventory's nodetune_validate_profile "
                       "lab-gloo is an all_reduce one; give --min-busbw",)
    judged = plan.plan_pair(_pair(**inv), plan.Options(collective="all_gather", min_busbw=2.0))
    assert judged.threshold is not None and judged.threshold.min_busbw_gbps == 2.0
    assert judged.notes == ()
    same = plan.plan_pair(_pair(**inv), plan.Options())  # all_reduce keeps the profile
    assert same.threshold is not None and same.threshold.origin == "profile lab-gloo"


def test_the_report_names_the_collective_it_plots() -> None:
    from nodetune.reports import html
    from tests.unit.reports_samples import load

    doc = load("validate-pair")
    assert "all_reduce busbw vs message size" in html.render(doc)  # a record from before
    doc["options"]["collective"] = "alltoall"
    page = html.render(doc)
    assert "alltoall busbw vs message size" in page and "all_reduce busbw" not in page


def test_the_prometheus_series_carry_the_collective() -> None:
    from nodetune.reports import prom
    from tests.unit.reports_samples import load

    doc = load("validate-pair")
    assert 'collective="all_reduce"' in prom.to_text(doc)
    doc["options"]["collective"] = "reduce_scatter"
    text = prom.to_text(doc)
    assert 'collective="reduce_scatter"' in text and 'collective="all_reduce"' not in text
