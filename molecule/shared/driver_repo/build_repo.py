#!/usr/bin/env python3
"""Build a signed, flat apt repository of stand-in packages for molecule.

NVIDIA's and Mellanox's repositories cannot be reached from the test
machines, and the real packages need GPUs, NICs and kernel headers. The
scenarios therefore build packages with the same names and versions (two
versions each: the pinned one and a newer one the role must not take), sign
the repository with a throwaway key and point the role at it through its
repository URL and key variables. Every package says "STAND-IN" in its
description so nobody mistakes it for the real thing.

Usage: build_repo.py SPEC.json OUTDIR

SPEC.json:
  {"packages": [{"name": "nvidia-driver", "versions": ["550.127.08-1", "550.135-1"],
                 "depends": "nvidia-persistenced (= {version})",
                 "conflicts": "nvidia-kernel-open-dkms",
                 "description": "...",
                 "files": {"/usr/bin/nvidia-smi": {"mode": "0755", "content": "..."}},
                 "postinst": "#!/bin/sh\\n...",
                 "vars": {"550.127.08-1": {"branch": "550"}}}]}

"{version}" in depends, file contents and postinst is replaced by the
package's version, and "{NAME}" by vars[version][NAME] where the optional
"vars" gives values per version (for packages of one release whose
versions differ, e.g. a metapackage depending on exact versions of
others). OUTDIR receives the .deb files, Packages, Release,
InRelease and key.asc (the public half of the throwaway signing key).
"""

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEY_UID = "nodetune molecule stand-in repository (throwaway) <standin@nodetune.invalid>"


def expand(text: str, pkg: dict, version: str) -> str:
    """Replace {version} and the package's per-version {NAME}s in text."""
    text = text.replace("{version}", version)
    for name, value in pkg.get("vars", {}).get(version, {}).items():
        text = text.replace("{" + name + "}", str(value))
    return text


def build_deb(pkg: dict, version: str, outdir: Path) -> Path:
    """Build one stand-in .deb with dpkg-deb and return its path."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        debian = root / "DEBIAN"
        debian.mkdir()
        control = [
            f"Package: {pkg['name']}",
            f"Version: {version}",
            f"Architecture: {pkg.get('architecture', 'all')}",
            "Maintainer: nodetune tests <standin@nodetune.invalid>",
            f"Description: STAND-IN for tests: {pkg.get('description', pkg['name'])}",
        ]
        if pkg.get("depends"):
            control.insert(3, "Depends: " + expand(pkg["depends"], pkg, version))
        if pkg.get("conflicts"):
            control.insert(3, "Conflicts: " + expand(pkg["conflicts"], pkg, version))
        (debian / "control").write_text("\n".join(control) + "\n")
        if pkg.get("postinst"):
            postinst = debian / "postinst"
            postinst.write_text(expand(pkg["postinst"], pkg, version))
            postinst.chmod(0o755)
        for path, spec in pkg.get("files", {}).items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(expand(spec.get("content", ""), pkg, version))
            target.chmod(int(spec.get("mode", "0644"), 8))
        deb = outdir / f"{pkg['name']}_{version.replace(':', '%3a')}_{pkg.get('architecture', 'all')}.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)],
                       check=True, stdout=subprocess.DEVNULL)
        return deb


def stanza(deb: Path) -> str:
    """Return the Packages stanza for one .deb."""
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    data = deb.read_bytes()
    extra = [
        f"Filename: ./{deb.name}",
        f"Size: {len(data)}",
        f"MD5sum: {hashlib.md5(data).hexdigest()}",  # noqa: S324 - apt index format, not security
        f"SHA256: {hashlib.sha256(data).hexdigest()}",
    ]
    return control.rstrip("\n") + "\n" + "\n".join(extra) + "\n"


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    outdir = Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    debs = [build_deb(pkg, v, outdir) for pkg in spec["packages"] for v in pkg["versions"]]
    packages = "\n".join(stanza(d) for d in debs)
    (outdir / "Packages").write_text(packages)
    (outdir / "Packages.gz").write_bytes(gzip.compress(packages.encode()))
    lines = ["Origin: nodetune-standin", "Label: nodetune-standin",
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()), "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (outdir / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (outdir / "Release").write_text("\n".join(lines) + "\n")

    gnupghome = tempfile.mkdtemp(prefix="standin-gpg-")
    env = dict(os.environ, GNUPGHOME=gnupghome)
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(gpg + ["--quick-gen-key", KEY_UID, "ed25519", "sign", "never"], check=True, env=env)
    subprocess.run(gpg + ["--yes", "--clearsign", "-o", str(outdir / "InRelease"), str(outdir / "Release")],
                   check=True, env=env)
    subprocess.run(gpg + ["--yes", "--armor", "--export", "-o", str(outdir / "key.asc")], check=True, env=env)
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
