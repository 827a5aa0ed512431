#!/usr/bin/env bash
# The unit tests on the suite's second ansible-core line: the newest supported
# one (2.21), which needs Python >= 3.12, from a controller container of the
# lab's Debian 13 image (Python 3.13). Debian 12 and Ubuntu 22.04 machines have
# no such Python; the container brings it. (.venv runs everything on the line
# pip picks for this machine's Python: 2.19 on Python 3.11.)
#
#   sudo ./scripts/ansible-next.sh                                   every unit test
#   sudo UNIT_TESTS="tests/unit/test_x.py ..." ./scripts/ansible-next.sh   some of them
#   sudo UNIT_TESTS="-m ansible tests/unit" ./scripts/ansible-next.sh   those that exercise Ansible
#
# Then, on the same ansible-core, ansible-test sanity on the built collection
# (scripts/collection-check.sh sanity; COLLECTION_CHECK=0 leaves it out). galaxy-importer
# runs in test.sh: in this container its ansible-lint step outran the importer's 180 s.
#
# With LAB=1 (the default) it starts a one-node lab of its own (nodetune-ansible-next,
# files in .nodetune/ansible-next-lab/, removed at the end), and on 2.21 applies it with
# `nodetune apply`, applies it again with --fail-on-change (nothing may change), and runs
# the molecule scenario net_sysctl_lab on its node. LAB=0 leaves the lab out.
#
# Run by scripts/test.sh once its unit tests have ended (and with VENV_ONLY=1 in its
# set-up). Needs the image `nodetune lab image` builds (localhost/nodetune-node:trixie). The controller's virtual environment is
# kept in .nodetune/ansible-next/ (git-ignored) and rebuilt when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (rootful podman, as the rest of the suite): sudo $0" >&2; exit 2; }

REPO=$PWD
IMAGE=localhost/nodetune-node:trixie
NAME=nodetune-ansible-next-$$
CORE='ansible-core>=2.21,<2.22'
# Scratch space (HOME, temporary files) for the controller.
SCRATCH=/tmp/nodetune-ansible-next
mkdir -p "$SCRATCH"

# VENV_ONLY=1: build (or keep) the controller venv and stop: scripts/test.sh's set-up.
VENV_ONLY=${VENV_ONLY:-0}
LAB=${LAB:-1}
[ "$VENV_ONLY" != 1 ] || LAB=0
LAB_NAME=nodetune-ansible-next
LAB_ROOT=$REPO/.nodetune/ansible-next-lab
lab() { (mkdir -p "$LAB_ROOT" && cd "$LAB_ROOT" && NODETUNE_LAB=$LAB_NAME "$REPO/.venv/bin/nodetune" lab "$@"); }
if [ "$LAB" = 1 ]; then
  [ -x "$REPO/.venv/bin/nodetune" ] || { echo "no .venv: run scripts/bootstrap.sh first" >&2; exit 2; }
  # A lab of this name is this script's own (left by a killed run): removed and started afresh.
  lab down >/dev/null
fi
# On any exit (Ctrl-C and SIGTERM included) the container goes too: `podman run` is not
# ended with this script, and would go on without it.
trap 'podman rm -f "$NAME" >/dev/null 2>&1 || true; [ "$LAB" != 1 ] || lab down >/dev/null || true' EXIT
if [ "$LAB" = 1 ]; then
  printf "\n\033[1m==> [ansible-core 2.21] a one-node lab of its own (%s)\033[0m\n" "$LAB_NAME"
  lab up --nodes 1
fi

# In scripts/test.sh's background CPU tier where it made one (tests/cpu_tiers.py): the
# container's cgroup goes there, not beside the lab's nodes at the default weight.
tier=()
if [ -n "${NODETUNE_TEST_BACKGROUND_CGROUP:-}" ] && [ -d "$NODETUNE_TEST_BACKGROUND_CGROUP" ] &&
   [ "$(podman info --format '{{.Host.CgroupManager}}')" = cgroupfs ]; then
  tier=(--cgroup-parent "$("$REPO/.venv/bin/python" -m tests.cpu_tiers podman-parent "$NODETUNE_TEST_BACKGROUND_CGROUP")")
fi
# The CA bundle: pip behind a TLS-intercepting proxy trusts what this machine trusts.
# /dev/shm of a node's size: `nodetune check` of the controller itself checks it.
podman run --rm --name "$NAME" --network host --shm-size 2g "${tier[@]}" \
  -v "$REPO:$REPO" -v "$SCRATCH:$SCRATCH" \
  -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
  -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
  -e CORE="$CORE" -e SCRATCH="$SCRATCH" -e UNIT_TESTS="${UNIT_TESTS:-}" \
  -e COLLECTION_CHECK="${COLLECTION_CHECK:-1}" -e LAB="$LAB" -e VENV_ONLY="$VENV_ONLY" \
  -e NODETUNE_LAB_INVENTORY="$LAB_ROOT/inventory/lab" -w "$REPO" \
  "$IMAGE" bash -euo pipefail -c '
step() { printf "\n\033[1m==> [ansible-core 2.21] %s\033[0m\n" "$*"; }
VENV=$PWD/.nodetune/ansible-next
stamp=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$stamp" ]; then
  step "controller venv: Python $(python3 -V | cut -d" " -f2), $CORE and nodetune[dev] (once per pyproject.toml)"
  rm -rf "$VENV" && python3 -m venv "$VENV"
  # pip keeps the wheels it fetched in the scratch directory, which outlives the container.
  PIP_CACHE_DIR="$SCRATCH/pip-cache" "$VENV/bin/pip" install -q "$CORE" -e ".[dev]"
  echo "$stamp" > "$VENV/.stamp"
fi
[ "$VENV_ONLY" != 1 ] || exit 0
export PATH="$VENV/bin:$PATH" PYTHONUNBUFFERED=1 ANSIBLE_ROLES_PATH="$PWD/roles" \
  ANSIBLE_LOCAL_TEMP="$SCRATCH/ansible-tmp" XDG_CACHE_HOME="$SCRATCH/cache" HOME="$SCRATCH/home"
mkdir -p "$HOME"
python -c "import ansible.release as r, sys; print(\"ansible-core\", r.__version__, \"on Python\", sys.version.split()[0])"
step "unit tests"
pytest -q -p no:cacheprovider ${UNIT_TESTS:-tests/unit}
if [ "$LAB" = 1 ]; then
  export NODETUNE_RUNS_DIR="$SCRATCH/runs"
  step "nodetune apply of the lab"
  nodetune apply "$NODETUNE_LAB_INVENTORY"
  step "nodetune apply again: nothing may change (--fail-on-change)"
  nodetune apply "$NODETUNE_LAB_INVENTORY" --fail-on-change
  step "molecule scenario net_sysctl_lab on the lab node"
  # molecule keeps a scenario state (prepared, converged) in a directory named after the
  # checkout folder name, under HOME, which outlives the container in the scratch space: a
  # later run of a checkout of that name found it and skipped prepare ("instances already
  # prepared"), so converge had nothing to change. Each run gets a fresh one (in /tmp of
  # the container), removed after, as every molecule run of the suite does
  # (tests/molecule/state_dir.py).
  # molecule sets its own collections path: the checkout is nodetune.cluster through its link.
  ANSIBLE_COLLECTIONS_PATH="$PWD/collections" \
    python -m tests.molecule.state_dir -- molecule test -s net_sysctl_lab
fi
if [ "$COLLECTION_CHECK" = 1 ]; then
  step "the built collection: ansible-test sanity"
  ./scripts/collection-check.sh sanity
fi
'
