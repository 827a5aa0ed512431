#!/usr/bin/python3
"""STAND-IN nvidia-ctk for nodetune's molecule scenario (not NVIDIA's tool).

A container has no GPU and no driver, so the real `nvidia-ctk cdi generate`
(which asks NVML for the devices) cannot run. This stand-in is faked at that
edge only: it reads the GPUs it is told exist from
/etc/nodetune-standin/nvidia-gpus ("INDEX UUID" per line; no file or no line:
it fails the way the real tool fails without a driver) and writes a spec in
the format the real tool writes (CDI, kind nvidia.com/gpu, one device per
index, per UUID, and "all"). `cdi list` reads every spec under /etc/cdi and
/var/run/cdi, as container engines do. Commands: --version, cdi generate
[--output=FILE], cdi list.
"""

import glob
import os
import re
import sys

GPUS = "/etc/nodetune-standin/nvidia-gpus"
VERSION = "@VERSION@"


def gpus():
    try:
        with open(GPUS, encoding="utf-8") as f:
            rows = [line.split() for line in f if line.strip()]
    except OSError:
        rows = []
    if not rows:
        sys.stderr.write('ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: '
                         'failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n')
        sys.exit(1)
    return [(r[0], r[1]) for r in rows]


def device(name, index):
    return ("- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia" + index + "\n"
            + "  name: " + ('"' + name + '"' if name.isdigit() else name) + "\n")


def spec():
    found = gpus()
    out = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:",
           "  - path: /dev/nvidiactl", "  - path: /dev/nvidia-uvm", "  - path: /dev/nvidia-uvm-tools",
           "  env:", "  - NVIDIA_VISIBLE_DEVICES=void", "  hooks:", "  - args:",
           "    - nvidia-cdi-hook", "    - create-symlinks", "    hookName: createContainer",
           "    path: /usr/bin/nvidia-cdi-hook", "devices:"]
    text = "\n".join(out) + "\n"
    for index, uuid in found:
        text += device(index, index) + device(uuid, index)
    all_edit = "".join("    - path: /dev/nvidia" + i + "\n" for i, _ in found)
    text += "- containerEdits:\n    deviceNodes:\n" + all_edit + "  name: all\n"
    return text + "kind: nvidia.com/gpu\n"


def listing():
    names = []
    for path in sorted(glob.glob("/etc/cdi/*.yaml") + glob.glob("/var/run/cdi/*.yaml")):
        with open(path, encoding="utf-8") as f:
            body = f.read()
        kind = re.search(r"(?m)^kind: *(\S+)", body)
        for name in re.findall(r"(?m)^  name: *\"?([^\"\n]+)\"?$", body):
            names.append((kind.group(1) if kind else "?") + "=" + name)
    sys.stderr.write("INFO[0000] Found %d CDI devices\n" % len(names))
    print("\n".join(names))


def main(argv):
    if argv[:1] == ["--version"]:
        print("NVIDIA Container Toolkit CLI version " + VERSION + " (STAND-IN)")
    elif argv[:2] == ["cdi", "generate"]:
        out = [a.split("=", 1)[1] for a in argv[2:] if a.startswith("--output=")]
        text = spec()
        if out:
            os.makedirs(os.path.dirname(out[0]), exist_ok=True)
            with open(out[0], "w", encoding="utf-8") as f:
                f.write(text)
            sys.stderr.write("INFO[0000] Generated CDI spec with version 0.5.0\n")
        else:
            sys.stdout.write(text)
    elif argv[:2] == ["cdi", "list"]:
        listing()
    else:
        sys.stderr.write("STAND-IN nvidia-ctk: unsupported command %s\n" % " ".join(argv))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
