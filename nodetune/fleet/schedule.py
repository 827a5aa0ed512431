"""Run a fleet's rounds: each round's pairs at once, bounded, stoppable, never overlapping.

The scheduler knows nothing of SSH or torch: it calls a pair runner for each
planned pair and gives it a stop event. The runner owns its pair from connect
to cleanup and must return (after cleaning up) soon after that event is set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from nodetune.errors import InputError
from nodetune.fleet.planner import FleetSpec, Outcome, PairOutcome, PlannedPair, next_round

log = logging.getLogger(__name__)

PairRunner = Callable[[PlannedPair, threading.Event], PairOutcome]
_POLL_S = 0.2
# Reason prefix of a pair cut short by Ctrl-C: it decides nothing about its nodes.
INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class FleetEvent:
    """Something worth showing while a fleet runs."""

    kind: str  # round, start, done
    message: str
    pair: PlannedPair | None = None
    outcome: PairOutcome | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """How to run the rounds."""

    parallel: int | None = None      # concurrent pairs; None: every pair of a round at once
    pair_timeout: float | None = None  # wall-clock limit of one pair test, on top of its own

    def check(self) -> None:
        """Raises InputError on values no run can use."""
        if self.parallel is not None and self.parallel < 1:
            raise InputError(f"--parallel {self.parallel}: must be >= 1")
        if self.pair_timeout is not None and self.pair_timeout <= 0:
            raise InputError(f"pair timeout {self.pair_timeout}: must be > 0 seconds")


@dataclass(slots=True)
class FleetRun:
    """The outcomes so far; ``interrupted`` when Ctrl-C or a stop ended the fleet early."""

    outcomes: list[PairOutcome] = field(default_factory=list)
    interrupted: bool = False
    rounds_s: dict[int, float] = field(default_factory=dict)

    def decisive(self) -> list[PairOutcome]:
        """The outcomes that say something about their nodes (not cut short by Ctrl-C)."""
        return [o for o in self.outcomes if not o.reason.startswith(INTERRUPTED)]


def run_rounds(spec: FleetSpec, runner: PairRunner, schedule: Schedule | None = None, *,
               on_event: Callable[[FleetEvent], None] = lambda _e: None,
               stop: threading.Event | None = None) -> FleetRun:
    """Plan and run rounds until the planner has none left.

    On KeyboardInterrupt (or ``stop`` being set) every running pair is told to
    stop, the call waits for each to clean up, and returns with ``interrupted``
    set; pairs not yet started never start.
    """
    schedule = schedule or Schedule()
    schedule.check()
    stop = stop or threading.Event()
    run = FleetRun()
    try:
        while not stop.is_set():
            pairs = next_round(spec, run.outcomes)
            if not pairs:
                break
            number = pairs[0].round
            on_event(FleetEvent("round", f"round {number}: {len(pairs)} pair(s)"))
            t0 = time.monotonic()
            done = _run_round(pairs, runner, schedule, on_event, stop)
            run.rounds_s[number] = round(time.monotonic() - t0, 3)
            run.outcomes += done
            if len(done) < len(pairs):
                break
    except KeyboardInterrupt:  # between rounds: nothing is running
        stop.set()
    run.interrupted = stop.is_set()
    return run


def _run_round(pairs: Sequence[PlannedPair], runner: PairRunner, schedule: Schedule,
               on_event: Callable[[FleetEvent], None], stop: threading.Event) -> list[PairOutcome]:
    busy = [h for p in pairs for h in p.hosts]
    if len(busy) != len(set(busy)):
        raise ValueError(f"round {pairs[0].round} puts a node in two pairs")
    width = min(len(pairs), schedule.parallel or len(pairs))
    waiting = list(pairs)
    running: dict[Future[PairOutcome], _Running] = {}
    outcomes: dict[PlannedPair, PairOutcome] = {}
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="pair")
    try:
        while waiting or running:
            while waiting and len(running) < width and not stop.is_set():
                pair = waiting.pop(0)
                pair_stop = threading.Event()
                on_event(FleetEvent("start", f"{pair.hosts[0]} <-> {pair.hosts[1]}", pair))
                running[pool.submit(_guarded, runner, pair, pair_stop)] = _Running(
                    pair, pair_stop, time.monotonic())
            if stop.is_set():
                waiting.clear()
            finished, _ = wait(list(running), timeout=_POLL_S, return_when=FIRST_COMPLETED)
            for fut in finished:
                pair = running.pop(fut).pair
                if pair not in outcomes:  # a pair stopped at its wall-clock limit stays hung
                    outcomes[pair] = fut.result()
                    on_event(FleetEvent("done", outcomes[pair].outcome.value, pair,
                                        outcomes[pair]))
            _enforce(running.values(), outcomes, schedule, stop, on_event)
    except KeyboardInterrupt:
        log.warning("interrupted: stopping %d running pair(s)", len(running))
        stop.set()
        _stop_all(running, outcomes)
    except InputError:
        # Bad input a node revealed: stop the other pairs (they clean up) and say so.
        stop.set()
        _stop_all(running, outcomes)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [outcomes[p] for p in pairs if p in outcomes]


@dataclass(frozen=True, slots=True)
class _Running:
    pair: PlannedPair
    stop: threading.Event
    started: float


def _enforce(running: Iterable[_Running], outcomes: dict[PlannedPair, PairOutcome],
             schedule: Schedule, stop: threading.Event,
             on_event: Callable[[FleetEvent], None]) -> None:
    """Tell pairs past their wall-clock limit (or all, on stop) to stop; record the hung."""
    now = time.monotonic()
    for r in running:
        over = schedule.pair_timeout is not None and now - r.started > schedule.pair_timeout
        if (over or stop.is_set()) and not r.stop.is_set():
            r.stop.set()
            if over and r.pair not in outcomes:
                outcomes[r.pair] = PairOutcome(
                    r.pair.hosts, r.pair.round, Outcome.TIMEOUT,
                    f"no result within {schedule.pair_timeout:g} s; stopped and cleaned up")
                on_event(FleetEvent("done", "timeout", r.pair, outcomes[r.pair]))


def _stop_all(running: Mapping[Future[PairOutcome], _Running],
              outcomes: dict[PlannedPair, PairOutcome]) -> None:
    """Set every running pair's stop event and wait until each has cleaned up."""
    for r in running.values():
        r.stop.set()
    pending = [f for f in running if not f.done()]
    while pending:
        try:
            _finished, not_done = wait(pending, timeout=_POLL_S)
            pending = list(not_done)
        except KeyboardInterrupt:
            log.warning("still cleaning up %d pair(s); wait for it", len(pending))
    for fut, r in running.items():
        if not fut.cancelled():
            # Cut short by the operator: says nothing about either node.
            outcomes.setdefault(r.pair, PairOutcome(
                r.pair.hosts, r.pair.round, Outcome.ERROR,
                f"{INTERRUPTED}: stopped and cleaned up ({fut.result().outcome.value} so far)"))


def _guarded(runner: PairRunner, pair: PlannedPair, stop: threading.Event) -> PairOutcome:
    """A runner's outcome; an unexpected exception is an error outcome, not a lost pair.

    Bad input a node reveals (an interface the inventory names that it lacks) is no
    outcome: it stops the fleet (exit 2), as bad input found before the first pair does.
    """
    try:
        return runner(pair, stop)
    except InputError:
        raise
    except Exception as exc:  # the fleet must go on and every pair must get an outcome
        log.exception("%s <-> %s: pair runner failed", *pair.hosts)
        return PairOutcome(pair.hosts, pair.round, Outcome.ERROR, f"{type(exc).__name__}: {exc}")
