#!/usr/bin/env bash
# Set everything up and run nodetune's main job on a local lab, no cluster needed:
# two podman nodes with systemd and sshd, provisioned and tuned by `nodetune apply`,
# then described by `nodetune facts` and proven by `nodetune validate` (gloo on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the lab uses rootful podman): sudo $0" >&2; exit 2; }
./scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
set -x
nodetune lab up --with-torch
nodetune apply inventory/lab
nodetune facts inventory/lab
nodetune validate inventory/lab --profile lab-gloo
