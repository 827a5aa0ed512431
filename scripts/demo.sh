#!/usr/bin/env bash
# Set everything up and run nodetune's main job on a local lab, no cluster needed:
# two podman nodes with systemd and sshd, provisioned and tuned by `nodetune apply`,
# then described by `nodetune facts` and proven by `nodetune validate` (gloo on CPU);
# last, four nodes, one of them slowed by a real tc token-bucket filter, and a fleet
# validation that names it bad in two rounds and the other three good (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
# Root for rootful podman (lab); as another user, re-run through sudo where it exists.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "run as root (the lab uses rootful podman)" >&2; exit 2; }
  exec sudo -E "$0" "$@"
fi
./scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
set -x
nodetune lab up --nodes 2 --shrink --with-torch
nodetune apply inventory/lab
nodetune facts inventory/lab
nodetune validate inventory/lab --profile lab-gloo
nodetune lab up --nodes 4 --with-torch
nodetune apply inventory/lab
slow="${NODETUNE_LAB:-nodetune-lab}-3"
nodetune lab fault "$slow" slow-link
nodetune validate inventory/lab --profile lab-gloo --sizes 16M --iters 5 --skip-checks || [ $? -eq 1 ]
nodetune lab fault "$slow" clear
