#!/usr/bin/env python3
"""How many rounds and pair tests a fleet validation needs, and how long it would take.

Runs nodetune's own round planner against simulated outcomes (a pair passes
exactly when both nodes are good) for N nodes with k bad, and predicts the
fleet's wall time from a measured per-pair time:

    python3 benchmarks/fleet_plan.py --pair-seconds 15.9
    python3 benchmarks/fleet_plan.py --from-report .nodetune/runs/<id>/report.json

Each round runs its pairs concurrently, at most --parallel at a time (default:
all), so a round takes ceil(pairs / parallel) pair times. "worst" puts every bad
node in a different round-1 pair (most suspects); "mean" averages random
placements. Beside it, the brute-force alternative that needs no adaptivity:
every pair once (the circle method, N - 1 rounds of N/2 pairs, as SuperBench
schedules it), and the ratio of the two wall times. No node is contacted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodetune.fleet.planner import FleetSpec, first_round  # noqa: E402
from nodetune.fleet.simulate import Simulation, both_good, simulate  # noqa: E402
from nodetune.verdicts import NodeState  # noqa: E402


def pair_seconds_from(report: Path) -> float:
    """A validate report's wall time: the sum of its phases."""
    doc = json.loads(report.read_text())
    result = doc.get("result") or doc
    phases = result.get("phases_s") or {}
    if not phases:
        raise SystemExit(f"{report}: no phases_s to take a pair time from")
    return float(sum(phases.values()))


def wall(sim: Simulation, pair_s: float, parallel: int | None) -> float:
    per_round: dict[int, int] = {}
    for o in sim.outcomes:
        per_round[o.round] = per_round.get(o.round, 0) + 1
    return sum(-(-count // (parallel or count)) * pair_s for count in per_round.values())


def exact(sim: Simulation, nodes: tuple[str, ...], bad: set[str]) -> bool:
    return all((sim.verdicts[n].state is NodeState.BAD) == (n in bad)
               and sim.verdicts[n].state in (NodeState.BAD, NodeState.GOOD) for n in nodes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair-seconds", type=float, help="measured wall time of one pair test")
    ap.add_argument("--from-report", type=Path, help="take the pair time from a report.json")
    ap.add_argument("--parallel", type=int, help="concurrent pairs per round (default: all)")
    ap.add_argument("--nodes", default="64,512,4096")
    ap.add_argument("--bad", default="1,4,16")
    ap.add_argument("--samples", type=int, default=20, help="random placements per cell")
    args = ap.parse_args()
    if args.from_report:
        pair_s = pair_seconds_from(args.from_report)
        source = str(args.from_report)
    elif args.pair_seconds:
        pair_s, source = args.pair_seconds, "--pair-seconds"
    else:
        ap.error("give --pair-seconds S or --from-report PATH (a measured pair time)")
    print(f"pair time {pair_s:.1f} s ({source}); parallel: {args.parallel or 'all'}\n")
    print("| N | k | rounds (worst) | pair tests (worst) | N/2 + 2k | exact | "
          "predicted wall (worst) | rounds / tests / wall (mean) | all-pairs tests / wall | "
          "wall ratio | plan time |")
    print("|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|")
    for n in (int(x) for x in args.nodes.split(",")):
        nodes = tuple(f"node{i:05d}" for i in range(n))
        for k in (int(x) for x in args.bad.split(",")):
            spec = FleetSpec(nodes, seed=1)
            r1 = first_round(spec)
            worst_bad = {p.hosts[0] for p in r1[:k]}
            t0 = time.perf_counter()
            worst = simulate(spec, both_good(worst_bad))
            plan_s = time.perf_counter() - t0
            rng = random.Random(n * 100 + k)  # noqa: S311 - repeatable placements
            sims = []
            ok = exact(worst, nodes, worst_bad)
            for _ in range(args.samples):
                bad = set(rng.sample(nodes, k))
                sim = simulate(FleetSpec(nodes, seed=rng.randrange(1 << 30)), both_good(bad))
                ok = ok and exact(sim, nodes, bad)
                sims.append(sim)
            mean = (statistics.mean(s.rounds for s in sims),
                    statistics.mean(s.pair_tests for s in sims),
                    statistics.mean(wall(s, pair_s, args.parallel) for s in sims))
            per_round = n // 2
            brute = (n - 1) * -(-per_round // (args.parallel or per_round)) * pair_s
            fleet = wall(worst, pair_s, args.parallel)
            print(f"| {n} | {k} | {worst.rounds} | {worst.pair_tests} | {n // 2 + 2 * k} | "
                  f"{'yes' if ok else 'NO'} | {fleet:.0f} s | "
                  f"{mean[0]:.2f} / {mean[1]:.1f} / {mean[2]:.0f} s | "
                  f"{n * (n - 1) // 2} / {brute:.0f} s | {fleet / brute:.4f} | "
                  f"{plan_s * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
