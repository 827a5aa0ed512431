#!/usr/bin/env bash
# Prepare a fresh Debian/Ubuntu machine to run nodetune, its local lab and its tests.
#
#   scripts/bootstrap.sh            apt packages (as root or via sudo) + .venv with nodetune[dev]
#
# Idempotent: a second run installs nothing new. The podman runtime tweak below
# is applied only when a probe container fails in the specific ways a
# restricted sandbox does (crun without cgroup v2, rlimits above the caller's);
# a working podman is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs iproute2 openssh-client python3-venv chromium)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "Installing apt packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Podman in a restricted sandbox: crun fails with "cgroups in hybrid mode not
# supported" and the default ulimits exceed what an unprivileged-in-practice
# root may set ("setrlimit RLIMIT_NPROC: Operation not permitted"). Detect
# those two failures only; never rewrite a configuration that already works.
CONF=/etc/containers/containers.conf
if [ ! -f "$CONF" ] || ! grep -q "nodetune" "$CONF"; then
  probe_img=$(podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | head -1 || true)
  needs_conf=0
  if [ -z "$probe_img" ]; then
    # No image to probe with: inspect the runtime and limits directly.
    if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != "cgroup2fs" ]; then needs_conf=1; fi
    if [ "$(ulimit -Hu)" != "unlimited" ] && [ "$(ulimit -Hu)" -lt 1048576 ]; then needs_conf=1; fi
  elif ! out=$(podman run --rm "$probe_img" true 2>&1); then
    echo "$out" | grep -qiE "hybrid mode|rlimit" && needs_conf=1
  fi
  if [ "$needs_conf" = 1 ]; then
    # Limits known to start here: the caller's nofile hard limit, nproc at most
    # 32768 (the caller's nproc hard limit can be higher than runc may set).
    nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] && nofile=1048576
    { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
    say "Podman here needs runc and ulimits within nofile=$nofile nproc=$nproc: writing $CONF"
    [ -f "$CONF" ] && $SUDO cp "$CONF" "$CONF.before-nodetune"
    $SUDO tee "$CONF" >/dev/null <<CONFEOF
# Written by nodetune's scripts/bootstrap.sh: this machine's podman could not
# start containers with its defaults (cgroup v1/hybrid, capped rlimits).
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONFEOF
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "Creating .venv"
  python3 -m venv .venv
fi
say "Installing nodetune and its development tools into .venv"
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[dev]'
say "Ready: $(.venv/bin/nodetune --version)"
