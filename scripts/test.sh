#!/usr/bin/env bash
# The whole test suite, from a clean clone on a fresh Debian/Ubuntu machine:
# set-up (apt, podman, .venv), lints, unit tests, a molecule scenario per
# role, and integration tests on a real two-node lab over SSH; then the unit
# tests again on ansible-core 2.21 (scripts/ansible-next.sh: .venv has the
# machine's Python, which may be 3.11 and so ansible-core 2.19).
#
#   sudo ./scripts/test.sh                 everything (about 20-30 minutes cold)
#   sudo ./scripts/test.sh tests/unit      only what you name (set-up and lint still run)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the lab and molecule use rootful podman): sudo $0" >&2; exit 2; }

./scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_ROLES_PATH="$PWD/roles"
export PYTHONUNBUFFERED=1

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
t0=$(date +%s)

step "Lint: ruff, mypy --strict, yamllint, ansible-lint (the whole collection)"
ruff check nodetune tests plugins
mypy
yamllint -s .
ansible-lint -q

step "Collection: ansible-galaxy collection build (build/collection/)"
ansible-galaxy collection build --force --output-path build/collection .

step "Node image for molecule and the lab"
nodetune lab image

step "pytest: unit, molecule, integration"
if [ "$#" -gt 0 ]; then
  pytest -ra "$@"
else
  pytest -ra --durations=25 tests/unit tests/molecule tests/integration
  step "The unit tests on ansible-core 2.21 (Python 3.13, from a controller container)"
  ./scripts/ansible-next.sh
fi
echo "suite wall time: $(( $(date +%s) - t0 )) s (after set-up)"
