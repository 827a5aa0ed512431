#!/usr/bin/env bash
# galaxy-importer's wall time under the load the suite puts beside it: three busy loops in
# this session at nice 0 (the lab tests' pytest and nodetune processes, which share
# test.sh's session) and two in sessions of their own (ansible-playbook under
# ansible-runner). The importer gives its ansible-lint step 180 s of wall time, whatever
# the load. Runs it once niced in this session (what test.sh did until the suite's
# importer timed out) and once at the default weight in a session of its own (what it does
# now), each bounded by LIMIT seconds. From the repository root, .venv on PATH:
#
#   PATH=$PWD/.venv/bin:$PATH benchmarks/importer_under_load.sh [LIMIT]
set -euo pipefail
limit=${1:-400}
loops=()
stop_loops() { [ "${#loops[@]}" -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true; loops=(); }
trap stop_loops EXIT
one() {  # $1: niced | setsid
  for _ in 1 2 3; do (while :; do :; done) & loops+=($!); done
  for _ in 1 2; do setsid -w bash -c 'while :; do :; done' & loops+=($!); done
  sleep 1
  local t0 rc=0
  t0=$(date +%s)
  if [ "$1" = niced ]; then
    timeout "$limit" nice -n 10 ./scripts/collection-check.sh importer >/dev/null 2>&1 || rc=$?
  else
    timeout "$limit" setsid -w ./scripts/collection-check.sh importer >/dev/null 2>&1 || rc=$?
  fi
  echo "$1: $(( $(date +%s) - t0 )) s, exit $rc$([ "$rc" -ne 124 ] || echo " (stopped at the limit)")"
  stop_loops
}
one setsid
one niced
