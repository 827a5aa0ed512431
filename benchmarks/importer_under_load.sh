#!/usr/bin/env bash
# galaxy-importer's wall time under the load the suite puts beside it: three busy loops in
# this script's session at nice 0 (the lab tests' pytest and nodetune processes, which
# share test.sh's session) and two in sessions of their own (ansible-playbook under
# ansible-runner). The importer gives its ansible-lint step 180 s of wall time, whatever
# the load. It runs three ways, each bounded by LIMIT seconds: at the default weight in a
# session of its own (what test.sh does), at the default weight in the loops' session, and
# at nice 10 in the loops' session (what test.sh did until the suite's importer timed out).
# From the repository root, .venv on PATH:
#
#   PATH=$PWD/.venv/bin:$PATH benchmarks/importer_under_load.sh [LIMIT]
#
# Under autogroups (kernel.sched_autogroup_enabled=1, tasks in the root cpu cgroup) a
# session is scheduled as one group; elsewhere the first two ways are the same.
set -euo pipefail
limit=${1:-400}
loops=() importer="" group=""
stop_all() {
  local p
  [ "${#loops[@]}" -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true
  if [ -n "$group" ]; then kill -TERM -- "-$group" 2>/dev/null || true; fi
  if [ -n "$importer" ]; then kill -TERM "$importer" 2>/dev/null || true; fi
  # Any job a signal caught before its pid was noted: its group if it has one, else itself.
  for p in $(jobs -p); do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  loops=() group="" importer=""
}
trap stop_all EXIT
trap 'exit 130' INT TERM
one() {  # $1: own-session | same-session | niced
  for _ in 1 2 3; do (while :; do :; done) & loops+=($!); done
  # A background job is no group leader here (no job control): setsid does not fork, and
  # $! is the loop itself.
  for _ in 1 2; do setsid bash -c 'while :; do :; done' & loops+=($!); done
  sleep 1
  local t0 rc=0
  t0=$(date +%s)
  case $1 in
    own-session) setsid timeout -k 10 "$limit" ./scripts/collection-check.sh importer >/dev/null 2>&1 &
                 group=$! ;;
    same-session) timeout -k 10 "$limit" ./scripts/collection-check.sh importer >/dev/null 2>&1 & ;;
    niced) timeout -k 10 "$limit" nice -n 10 ./scripts/collection-check.sh importer >/dev/null 2>&1 & ;;
  esac
  importer=$!
  wait "$importer" || rc=$?
  echo "$1: $(( $(date +%s) - t0 )) s, exit $rc$([ "$rc" -ne 124 ] || echo " (stopped at the limit)")"
  stop_all
}
one own-session
one same-session
one niced
