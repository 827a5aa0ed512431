#!/usr/bin/env bash
# The whole test suite, from a clean clone on a fresh Debian/Ubuntu machine: set-up
# (apt, podman, .venv, the node images, the 2.21 venv), lints, then side by side the unit
# tests, a molecule scenario per role and the integration tests on a real lab over SSH;
# once the unit tests are done, ansible-test sanity and galaxy-importer on the built
# collection, and the unit tests that exercise Ansible and the collection checks again on
# ansible-core 2.21 (scripts/ansible-next.sh: .venv has the machine's Python, which may be
# 3.11 and so ansible-core 2.19). Each phase's wall time is printed at the end.
#
#   ./scripts/test.sh                 everything (25-30 minutes after set-up on the
#                                     2-core machine of docs/benchmarks.md, 2026-12-01;
#                                     45 on the slower ones before; set-up 1-3 minutes
#                                     once cached)
#   ./scripts/test.sh tests/unit      only what you name (set-up runs, lint does not)
#   ./scripts/test.sh quick           the quick unit pass: the unit tests that run no
#                                     Ansible, 4 pytest workers (about 80 s)
#   ./scripts/test.sh unit            every unit test, 4 pytest workers (about 3 minutes);
#                                     after quick or unit, pytest options only (-x, -k)
#   NODETUNE_TEST_KEEP_LAB=1 ./scripts/test.sh tests/integration/test_tune.py
#                                     one lab module; the suite's lab is kept for the next
set -euo pipefail
cd "$(dirname "$0")/.."
# The inner loop's named targets. The unit tests mostly wait on their own timeouts, so
# four workers (pytest-xdist; a module's tests stay together in one) finish them in a
# third of the time; the lab's tests share one lab and keep to one process.
case "${1:-}" in
  quick) shift; set -- -n 4 --dist loadfile -m "not ansible" "$@" tests/unit ;;
  unit) shift; set -- -n 4 --dist loadfile "$@" tests/unit ;;
esac
# Root for rootful podman (lab and molecule); as another user, re-run through sudo where it exists.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "run as root (the lab and molecule use rootful podman)" >&2; exit 2; }
  exec sudo -E "$0" "$@"
fi

# Set-up: apt, .venv, the node images (cached after the first run) and, for the whole
# suite, the ansible-core 2.21 pass's controller venv (in .nodetune/ansible-next, its
# wheels cached in /tmp/nodetune-ansible-next).
setup_t0=$(date +%s)
./scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_ROLES_PATH="$PWD/roles"
export PYTHONUNBUFFERED=1
printf '\n\033[1m==> Node images for molecule and the lab (built once, then reused)\033[0m\n'
nodetune lab image
if [ "$#" -eq 0 ]; then
  printf '\n\033[1m==> The ansible-core 2.21 controller venv (once per pyproject.toml)\033[0m\n'
  VENV_ONLY=1 ./scripts/ansible-next.sh
fi
setup_s=$(( $(date +%s) - setup_t0 ))

# Each phase's wall time is printed at the end, beside the set-up's and the total.
phase="" phase_t0=0 phases=()
end_phase() {
  [ -z "$phase" ] || phases+=("$(printf '%6d s  %s' $(( $(date +%s) - phase_t0 )) "$phase")")
  phase=""
}
step() { end_phase; phase="$*" phase_t0=$(date +%s); printf '\n\033[1m==> %s\033[0m\n' "$*"; }
t0=$(date +%s)
# The machine's busy CPU time (every process, containers included: /proc/stat's user,
# nice, system, irq and softirq ticks), so that a run says how much work it was, not only
# how long it took: the suite's time on N cores is at least that work divided by N.
busy_ticks() {  # in bash: mawk prints a sum past 2^31 in exponent form
  local _cpu user nice system _idle _iowait irq softirq _rest
  read -r _cpu user nice system _idle _iowait irq softirq _rest </proc/stat
  echo $(( user + nice + system + irq + softirq ))
}
cores=$(grep -c '^cpu[0-9]' /proc/stat)  # what /proc/stat's sum covers (the host's, in a container)
busy0=$(busy_ticks)

if [ "$#" -eq 0 ]; then  # the whole suite; a run of named tests (the inner loop) skips it
  step "Lint: ruff, mypy --strict, yamllint, ansible-lint (the whole collection)"
  ruff check nodetune tests plugins
  mypy
  yamllint -s .
  ansible-lint -q
fi

step "Collection: ansible-galaxy collection build (build/collection/)"
ansible-galaxy collection build --force --output-path build/collection .

if [ "$#" -gt 0 ]; then step "pytest: $*"; else step "pytest: unit and molecule (the integration tests beside them)"; fi
# The integration tests start and remove a lab of their own (tests/lab_name.py); should
# pytest itself be killed, its lab goes here, and never a lab of another name.
suite_lab=$(python -c 'import os; from tests.lab_name import suite_lab_name; print(suite_lab_name(os.environ))')
remove_suite_lab() {
  [ "${NODETUNE_TEST_KEEP_LAB:-}" != 1 ] || return 0  # the inner loop keeps it (README)
  if [ -d ".nodetune/test-labs/$suite_lab" ]; then
    (cd ".nodetune/test-labs/$suite_lab" && NODETUNE_LAB="$suite_lab" nodetune lab down >/dev/null) || true
  fi
}
# The background CPU tier (tests/cpu_tiers.py): molecule's scenarios, ansible-test sanity
# and the 2.21 pass run in a cpu cgroup of low weight of the suite's own, so that the lab's
# tests, the critical path, get the CPU they ask for. nice alone does not do it: the kernel
# schedules each session as one group (autogroups), ansible-runner starts ansible-playbook
# in a session of its own, podman's containers have cgroups of their own. Where no cgroup
# can be made (cgroup v2, not root), everything runs untiered.
background=""
if [ "$#" -eq 0 ]; then
  background=$(python -m tests.cpu_tiers create "nodetune-test-$$-background")
  [ -n "$background" ] || echo "cpu tier: no cpu cgroup can be made here; molecule and the 2.21 pass run untiered"
fi
export NODETUNE_TEST_BACKGROUND_CGROUP="$background"
remove_tier() {  # what still runs there gets 5 s to end, then SIGKILL (tests/cpu_tiers.py)
  [ -z "$background" ] || python -m tests.cpu_tiers remove "$background" || true
}
clean_up() { remove_suite_lab; remove_tier; }
trap clean_up EXIT
next_rc=0 pytest_rc=0
if [ "$#" -gt 0 ]; then
  pytest -ra "$@"
else
  # The collection checks and the ansible-core 2.21 pass start once the unit tests have
  # ended (tests/molecule/conftest.py touches unit-done), or pytest has, beside molecule's
  # scenarios, in the background tier with them. First what a Galaxy /
  # Automation Hub reviewer runs, ansible-test sanity and galaxy-importer on the built
  # collection (scripts/collection-check.sh, here on 2.19); then scripts/ansible-next.sh:
  # the unit tests that exercise Ansible (marked `ansible` in tests/unit/conftest.py), a lab
  # apply, a molecule scenario and sanity, on 2.21. Their output is printed after pytest's;
  # everything must pass.
  next_dir=$(mktemp -d /tmp/nodetune-test-next.XXXXXX)
  # galaxy-importer stays out of the tier and runs at the default weight in a session of its
  # own (an autogroup: docs/benchmarks.md), for it gives its ansible-lint step 180 s: niced
  # in this session, behind the lab tests' processes, it got under a tenth of a core and
  # timed out. A background job is no process group leader here (no job control), so
  # setsid makes its session without forking: the job's pid is the session's group, which
  # the EXIT trap ends first (a kill of this script's group does not reach it).
  tiered() { python -m tests.cpu_tiers run "$background" -- nice -n 10 "$@"; }
  own_session() {
    local pid rc=0
    setsid "$@" &
    pid=$!
    echo "$pid" >"$next_dir/own-session"
    wait "$pid" || rc=$?
    rm -f "$next_dir/own-session"
    return "$rc"
  }
  end_own_session() {
    local pid
    pid=$(cat "$next_dir/own-session" 2>/dev/null) || return 0
    [ -z "$pid" ] || kill -TERM -- "-$pid" 2>/dev/null || true
  }
  (
    while [ ! -e "$next_dir/unit-done" ] && [ ! -e "$next_dir/pytest-done" ]; do sleep 5; done
    began=$(date +%s) rc=0
    { tiered ./scripts/collection-check.sh sanity &&
        own_session ./scripts/collection-check.sh importer &&
        UNIT_TESTS="-m ansible tests/unit" tiered ./scripts/ansible-next.sh
    } >"$next_dir/log" 2>&1 || rc=$?
    echo "$rc $(( began - t0 )) $(( $(date +%s) - began ))" >"$next_dir/rc"
  ) &
  next_pid=$!
  # The lab's integration tests, in a pytest session of their own, start at once: they
  # wait on nodes, Slurm and timeouts for about half their time, which the unit tests and
  # molecule's scenarios (started at collection: tests/molecule/runs.py) fill. Their
  # output goes to a file, printed when they end.
  (
    began=$(date +%s) rc=0
    pytest -ra --durations=25 -p no:cacheprovider --basetemp="$next_dir/integration-tmp" \
      tests/integration >"$next_dir/integration.log" 2>&1 || rc=$?
    echo "$rc $(( $(date +%s) - began ))" >"$next_dir/integration-rc"
  ) &
  it_pid=$!
  trap 'end_own_session; pkill -TERM -P "$it_pid" 2>/dev/null || true; pkill -TERM -P "$next_pid" 2>/dev/null || true; kill "$next_pid" "$it_pid" 2>/dev/null || true; clean_up; rm -rf "$next_dir"' EXIT
  # The lab's tests are the critical path: molecule's scenarios run in the background tier
  # (tests/molecule/runs.py), in the CPU the lab's tests leave, and so do the collection
  # checks and the 2.21 pass. The unit tests keep the default weight: some bound a wall time.
  NODETUNE_UNIT_DONE_FILE="$next_dir/unit-done" \
    pytest -ra --durations=25 tests/unit tests/molecule || pytest_rc=$?
  touch "$next_dir/pytest-done"  # molecule has ended, whatever it signalled
  step "pytest: integration (started beside the unit tests): its end, its output"
  wait "$it_pid" || true
  cat "$next_dir/integration.log"
  read -r it_rc it_took <"$next_dir/integration-rc" || { it_rc=1 it_took=0; }
  [ "$it_rc" -eq 0 ] || pytest_rc=$it_rc
  phases+=("$(printf '%6d s  %s' "$it_took" "pytest: integration, from the unit tests' start on (exit $it_rc)")")
  step "The collection checks and the ansible-core 2.21 pass: their end, their output"
  wait "$next_pid" || true
  trap clean_up EXIT
  cat "$next_dir/log"
  read -r next_rc next_began next_took <"$next_dir/rc" || { next_rc=1 next_began=0 next_took=0; }
  rm -rf "$next_dir"
  phases+=("$(printf '%6d s  %s' "$next_took" "the collection checks and the ansible-core 2.21 pass, from $next_began s on, beside pytest (exit $next_rc)")")
fi
end_phase
printf '\n\033[1m==> Phase times\033[0m\n%6d s  set-up (apt, .venv, node images; the 2.21 venv for the whole suite)\n' "$setup_s"
printf '%s\n' "${phases[@]}"
wall=$(( $(date +%s) - t0 ))
busy=$(( ($(busy_ticks) - busy0) / $(getconf CLK_TCK) ))
echo "suite wall time: $wall s (after set-up); the machine's busy CPU meanwhile: $busy s on $cores cores ($(( 100 * busy / (wall * cores + 1) )) %)"
if [ "$#" -eq 0 ] && { [ "$pytest_rc" -ne 0 ] || [ "$next_rc" -ne 0 ]; }; then
  echo "FAILED: pytest exit $pytest_rc, the collection checks and the 2.21 pass exit $next_rc" >&2
  exit 1
fi
