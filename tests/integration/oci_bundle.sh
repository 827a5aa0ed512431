set -e
export DEBIAN_FRONTEND=noninteractive
command -v crun >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends crun >/dev/null 2>&1; }
B=/srv/nodetune-bundle
rm -rf "$B" "$B-shm64"
mkdir -p "$B/rootfs" "$B-shm64"
cd / && tar -c --exclude=test --exclude=__pycache__ --exclude='perl*' \
  etc bin sbin lib lib64 usr/bin/python3* usr/bin/dash usr/bin/sh usr/bin/env usr/bin/cut \
  usr/bin/sha256sum usr/lib/python3* "usr/lib/$(uname -m)-linux-gnu" usr/lib64 2>/dev/null \
  | tar -x -C "$B/rootfs"
mkdir -p "$B/rootfs/tmp" "$B/rootfs/proc" "$B/rootfs/dev" "$B/rootfs/sys" "$B/rootfs/opt/nodetune-shared"
cd "$B" && crun spec && mv config.json spec.json
python3 - "$B" <<'PY'
import json, sys
b = sys.argv[1]
spec = json.load(open(f"{b}/spec.json"))
spec["process"]["terminal"] = False
spec.pop("hostname", None)  # the node's own: no uts namespace
spec["root"] = {"path": "rootfs", "readonly": False}
spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"]
                               if n["type"] not in ("network", "ipc", "uts")]
binds = [{"destination": d, "type": "bind", "source": d, "options": ["rbind", o]}
         for d, o in (("/tmp", "rw"), ("/opt/nodetune-shared", "ro"))]
small = dict(spec, mounts=spec["mounts"] + binds)
host_shm = dict(spec, mounts=[m for m in spec["mounts"] if m["destination"] != "/dev/shm"]
                + binds + [{"destination": "/dev/shm", "type": "bind", "source": "/dev/shm",
                            "options": ["rbind", "rw"]}])
json.dump(host_shm, open(f"{b}/config.json", "w"), indent=1)
json.dump(small, open(f"{b}-shm64/config.json", "w"), indent=1)
PY
rm -f "$B/spec.json"
cp -al "$B/rootfs" "$B-shm64/rootfs"  # Slurm runs a bundle's own rootfs (hard links: no copy)
printf '%s\n' \
 'RunTimeQuery="crun --root=/run/nodetune-crun state %n.%u.%j.%s.%t"' \
 'RunTimeKill="crun --root=/run/nodetune-crun kill -a %n.%u.%j.%s.%t"' \
 'RunTimeDelete="crun --root=/run/nodetune-crun delete --force %n.%u.%j.%s.%t"' \
 'RunTimeRun="crun --root=/run/nodetune-crun run --bundle %b %n.%u.%j.%s.%t"' \
 > /etc/slurm/oci.conf
