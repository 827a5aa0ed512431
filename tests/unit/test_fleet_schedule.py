"""The fleet scheduler with stand-in pair runners (threads, no SSH): bounds, hangs, Ctrl-C."""

from __future__ import annotations

import threading

import pytest

from nodetune.errors import InputError
from nodetune.fleet.planner import FleetSpec, Outcome, PairOutcome, PlannedPair
from nodetune.fleet.schedule import FleetEvent, Schedule, run_rounds
from nodetune.fleet.verdict import decide
from nodetune.verdicts import NodeState


class Recorder:
    """A pair runner that records concurrency and whether every pair cleaned up."""

    def __init__(self, bad: set[str], hang: set[tuple[str, str]] | None = None,
                 hold: threading.Event | None = None) -> None:
        self.bad = bad
        self.hang = hang or set()
        self.hold = hold
        self.lock = threading.Lock()
        self.active: set[str] = set()
        self.peak = 0
        self.started: list[tuple[str, str]] = []
        self.cleaned: list[tuple[str, str]] = []

    def __call__(self, pair: PlannedPair, stop: threading.Event) -> PairOutcome:
        with self.lock:
            assert not self.active & set(pair.hosts), "two pairs on one node at once"
            self.active |= set(pair.hosts)
            self.peak = max(self.peak, len(self.active) // 2)
            self.started.append(pair.hosts)
        try:
            if tuple(sorted(pair.hosts)) in self.hang:
                stop.wait()  # hangs until told to stop
                return PairOutcome(pair.hosts, pair.round, Outcome.TIMEOUT, "stopped")
            if self.hold is not None:
                self.hold.wait(timeout=30)
            failed = set(pair.hosts) & self.bad
            return PairOutcome(pair.hosts, pair.round, Outcome.FAIL if failed else Outcome.PASS)
        finally:
            with self.lock:
                self.active -= set(pair.hosts)
                self.cleaned.append(pair.hosts)


NODES = tuple(f"n{i}" for i in range(12))


def test_parallel_bounds_concurrent_pairs_and_nodes_never_overlap() -> None:
    hold = threading.Event()
    runner = Recorder(bad={"n3"}, hold=hold)
    events: list[FleetEvent] = []

    def on_event(e: FleetEvent) -> None:
        events.append(e)
        if sum(ev.kind == "start" for ev in events) >= 3:
            hold.set()

    run = run_rounds(FleetSpec(NODES, seed=1), runner, Schedule(parallel=3), on_event=on_event)
    assert runner.peak <= 3
    assert run.interrupted is False
    assert {o.round for o in run.outcomes} == {1, 2}
    verdicts = decide(FleetSpec(NODES, seed=1), run.outcomes)
    assert [n for n, v in verdicts.items() if v.state is NodeState.BAD] == ["n3"]
    assert sorted(runner.started) == sorted(runner.cleaned)


def test_default_runs_every_pair_of_a_round_at_once() -> None:
    barrier = threading.Barrier(6, timeout=30)

    def runner(pair: PlannedPair, stop: threading.Event) -> PairOutcome:
        if pair.round == 1:
            barrier.wait()  # only returns when all six round-1 pairs run together
        return PairOutcome(pair.hosts, pair.round, Outcome.PASS)

    run = run_rounds(FleetSpec(NODES), runner)
    assert len(run.outcomes) == 6 and all(o.passed for o in run.outcomes)


def test_a_hung_pair_is_stopped_at_its_limit_and_decided_by_round_two() -> None:
    spec = FleetSpec(NODES[:8], seed=4)
    from nodetune.fleet.planner import first_round

    hung = tuple(sorted(first_round(spec)[0].hosts))
    runner = Recorder(bad=set(), hang={hung})
    run = run_rounds(spec, runner, Schedule(pair_timeout=0.5))
    first = [o for o in run.outcomes if o.round == 1]
    timeouts = [o for o in first if o.outcome is Outcome.TIMEOUT]
    assert [tuple(sorted(o.hosts)) for o in timeouts] == [hung]
    assert "no result within 0.5 s" in timeouts[0].reason
    assert sum(o.passed for o in first) == 3
    # Round 2 retests both nodes of the hung pair with good nodes; here both pass.
    second = [o for o in run.outcomes if o.round == 2]
    assert sorted(h for o in second for h in o.hosts if h in hung) == sorted(hung)
    assert sorted(runner.started) == sorted(runner.cleaned)


def test_ctrl_c_stops_every_running_pair_and_starts_no_more() -> None:
    spec = FleetSpec(NODES[:8], seed=2)
    from nodetune.fleet.planner import first_round

    everyone = {tuple(sorted(p.hosts)) for p in first_round(spec)}
    runner = Recorder(bad=set(), hang=everyone)
    starts = 0

    def on_event(e: FleetEvent) -> None:
        nonlocal starts
        if e.kind == "start":
            starts += 1
            if starts == 3:
                raise KeyboardInterrupt

    run = run_rounds(spec, runner, Schedule(parallel=4), on_event=on_event)
    assert run.interrupted
    assert len(runner.started) == 2  # the third never started
    assert sorted(runner.started) == sorted(runner.cleaned)
    assert all(o.reason.startswith("interrupted") for o in run.outcomes)
    assert run.decisive() == []


def test_a_runner_that_raises_gives_an_error_outcome() -> None:
    def runner(pair: PlannedPair, stop: threading.Event) -> PairOutcome:
        if "n0" in pair.hosts:
            raise RuntimeError("boom")
        return PairOutcome(pair.hosts, pair.round, Outcome.PASS)

    run = run_rounds(FleetSpec(NODES[:4], seed=0), runner)
    errors = [o for o in run.outcomes if o.outcome is Outcome.ERROR]
    assert errors and all("RuntimeError: boom" in o.reason for o in errors)


def test_bad_parallel_is_input_error() -> None:
    with pytest.raises(InputError, match="--parallel"):
        run_rounds(FleetSpec(NODES), lambda p, s: PairOutcome(p.hosts, p.round, Outcome.PASS),
                   Schedule(parallel=0))


def test_bad_input_a_node_reveals_stops_the_fleet_instead_of_an_error_outcome() -> None:
    """A pair whose node reveals bad input (an interface it lacks) raises it out of the
    rounds; the pair still running is told to stop and cleans up; no later round starts."""
    ran: list[tuple[tuple[str, str], bool]] = []

    def runner(pair: PlannedPair, stop: threading.Event) -> PairOutcome:
        if "n0" in pair.hosts:
            raise InputError("nosuch0 is not an interface of n0", host="n0")
        told = stop.wait(timeout=10)  # a long pair, cut short only if the fleet says so
        ran.append((pair.hosts, told))
        return PairOutcome(pair.hosts, pair.round, Outcome.TIMEOUT, "stopped")

    with pytest.raises(InputError, match="nosuch0"):
        run_rounds(FleetSpec(nodes=NODES[:4], seed=1), runner, Schedule(parallel=2))
    assert len(ran) == 1 and ran[0][1] is True, ran
