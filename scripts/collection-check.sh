#!/usr/bin/env bash
# What a Galaxy or Automation Hub reviewer runs on the collection, on the tarball
# `ansible-galaxy collection build` makes: `ansible-test sanity` of this
# ansible-core (installed as ansible_collections/nodetune/cluster in a temporary
# directory), then galaxy-importer. Fails on any error; the only accepted sanity
# findings are those tests/sanity/ignore-<version>.txt lists, each with its reason.
#
#   scripts/collection-check.sh              both (a few minutes; the first run longer)
#   scripts/collection-check.sh sanity       ansible-test sanity only
#   scripts/collection-check.sh importer     galaxy-importer only
#
# Uses the ansible-test, ansible-galaxy and galaxy-importer on PATH (.venv: the dev
# extra). Run by scripts/test.sh; scripts/ansible-next.sh runs its sanity part on 2.21.
#
# Offline except for the package index: ansible-test installs each sanity test's
# pinned requirements into virtual environments of its own, from PyPI, after
# bootstrapping pip in them with a get-pip script it downloads from Ansible's CI file
# server. That script is replaced by scripts/collection/get_pip.py, which runs pip from
# the pip wheel (downloaded from PyPI). The environments and the wheel are kept
# under .nodetune/ansible-test/ (git-ignored; NODETUNE_ANSIBLE_TEST_HOME moves it),
# which ansible-test sees as its home directory.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
what=${1:-all}
case "$what" in all|sanity|importer) ;; *) echo "usage: $0 [all|sanity|importer]" >&2; exit 2 ;; esac

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
python=$(command -v python3)
py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
core=$("$python" -c 'import ansible.release as r; print(r.__version__)')

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodetune-collection-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ansible-galaxy collection build --output-path "$WORK" . >/dev/null
tarball=$(echo "$WORK"/nodetune-cluster-*.tar.gz)
COLL=$WORK/ansible_collections/nodetune/cluster
mkdir -p "$COLL"
tar -xzf "$tarball" -C "$COLL"

if [ "$what" != importer ]; then
  step "ansible-test sanity (ansible-core $core, Python $py) on $(basename "$tarball")"
  t0=$(date +%s)
  TEST_HOME=${NODETUNE_ANSIBLE_TEST_HOME:-$REPO/.nodetune/ansible-test}
  cache=$TEST_HOME/.ansible/test/cache
  mkdir -p "$cache"
  pip_version=$("$python" -c '
from ansible_test._internal.host_configs import NativePythonConfig
from ansible_test._internal.python_requirements import get_venv_packages
import sys
print(get_venv_packages(NativePythonConfig(version=sys.argv[1], path=sys.executable))["pip"])' "$py")
  if [ ! -f "$cache/pip-$pip_version-py3-none-any.whl" ]; then
    "$python" -m pip download -q --no-deps --only-binary=:all: -d "$cache" "pip==$pip_version"
  fi
  cp scripts/collection/get_pip.py "$cache/get_pip_${pip_version//./_}.py"
  # pip in ansible-test's environments still reads the caller's pip configuration.
  export XDG_CONFIG_HOME=${XDG_CONFIG_HOME:-$HOME/.config}
  log=$WORK/sanity.log
  rc=0
  (cd "$COLL" && HOME=$TEST_HOME ansible-test sanity --python "$py" --color no) >"$log" 2>&1 || rc=$?
  grep -vE '^ *(Collecting|Downloading|Installing|Successfully|Using cached|Requirement already|━)|^WARNING: Location' "$log" || true
  ran=$(grep -c '^Running sanity test' "$log" || true)
  failed=$(grep -cE '^ERROR: [^F ]' "$log" || true)
  ignored=$(grep -cvE '^\s*(#|$)' "$COLL/tests/sanity/ignore-${core%.*}.txt" 2>/dev/null || true)
  echo "ansible-test sanity: $ran tests run, $failed errors, ${ignored:-0} ignore-file entries, exit $rc, $(( $(date +%s) - t0 )) s"
  [ "$rc" -eq 0 ] || exit 1
fi

if [ "$what" != sanity ]; then
  step "galaxy-importer on $(basename "$tarball")"
  t0=$(date +%s)
  mkdir -p "$WORK/importer"
  # ansible-lint's cache (the importer makes it XDG_CACHE_HOME) is kept between runs: a cold
  # one can take most of the 180 s the importer gives ansible-lint on a loaded machine.
  LINT_CACHE=${NODETUNE_ANSIBLE_TEST_HOME:-$REPO/.nodetune/ansible-test}/galaxy-importer-$py
  mkdir -p "$LINT_CACHE"
  log=$WORK/importer.log
  rc=0
  (cd "$WORK/importer" &&
    GALAXY_IMPORTER_CONFIG=$REPO/scripts/collection/galaxy-importer.cfg \
    GALAXY_IMPORTER_TMP_ROOT_DIR=$WORK/importer \
    GALAXY_IMPORTER_ANSIBLE_LOCAL_TMP=$LINT_CACHE \
    "$python" -m galaxy_importer.main "$tarball") >"$log" 2>&1 || rc=$?
  grep -v '^Loading ' "$log" || true
  # Every warning or error fails the check, but for the notice that ignore files exist:
  # they hold only the findings the ignore files' reasons explain.
  problems=$(grep -E '^(WARNING|ERROR|CRITICAL):' "$log" \
    | grep -vE '^WARNING: Ignore files skip ansible-test sanity tests, found ignore-[0-9.]+\.txt with [0-9]+ statement' \
    || true)
  docs_rc=0
  if [ "$rc" -eq 0 ]; then
    "$python" scripts/collection/importer_result.py "$WORK/importer/importer_result.json" "$COLL" || docs_rc=$?
  fi
  echo "galaxy-importer: exit $rc, $(printf '%s' "$problems" | grep -c . || true) warnings or errors, $(( $(date +%s) - t0 )) s"
  if [ -n "$problems" ]; then
    printf 'galaxy-importer reported:\n%s\n' "$problems" >&2
  fi
  [ "$rc" -eq 0 ] && [ -z "$problems" ] && [ "$docs_rc" -eq 0 ] || exit 1
fi
